"""Waiting on a condition with a deadline: the one polling loop the tests may use.

Tests wait on messages or events where they can (``launch --events -``,
:mod:`tests.helpers.launching`); where only the operating system can tell (a process gone, a
file an external tool writes), they poll through :func:`wait_until`, which fails with what it
was waiting for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout: float, what: str, every: float = 0.05) -> T:
    """Call ``check`` until it returns something truthy (returned), or fail after ``timeout``
    seconds naming ``what`` did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"{what}: not within {timeout:g} s")
        time.sleep(every)
