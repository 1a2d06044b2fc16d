"""The one way a test skips: on a user's machine a missing part (root, sshd, data) skips the
test; under ``EDGETRAIN_SYSTEM_TESTS=1`` (CI) it fails instead."""

from __future__ import annotations

import os

import pytest

SYSTEM_TESTS = os.environ.get("EDGETRAIN_SYSTEM_TESTS") == "1"


def skip_or_fail(reason: str) -> None:
    """Skip on a user's machine; under EDGETRAIN_SYSTEM_TESTS=1 (CI) a missing part fails."""
    if SYSTEM_TESTS:
        pytest.fail(f"{reason} (EDGETRAIN_SYSTEM_TESTS=1 turns this skip into a failure)")
    pytest.skip(reason)
