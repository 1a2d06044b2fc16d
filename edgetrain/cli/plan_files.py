"""What ``plan`` and ``plan --pipeline`` share: unit errors, and plan files never overwritten."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from edgetrain.errors import EdgetrainError


def unit_error(exc: ValueError) -> EdgetrainError:
    """A units parser's ``ValueError("problem; fix")`` as a one-line error."""
    problem, _, fix = str(exc).partition("; ")
    return EdgetrainError(problem, fix or None)


def free_stem(folder: Path, stem: str, names: Callable[[str], list[str]] = lambda s: []) -> str:
    """``stem``, or ``stem-2``, ``stem-3`` ...: the first whose plan file ``<stem>.json`` and
    other ``names(stem)`` are all absent from ``folder``. A plan a launched run read (``[ps]
    plan``, ``[pipeline] plan``) is never overwritten."""
    for k in itertools.count(1):
        cand = stem if k == 1 else f"{stem}-{k}"
        if not any((folder / n).exists() for n in [f"{cand}.json", *names(cand)]):
            return cand
    raise AssertionError("unreachable")


def renamed_note(existing: Path, written: Path) -> str:
    return (
        f"{existing} already exists (a run may have read it) and is kept: wrote {written}; "
        f'to use it, set the recipe\'s [ps] or [pipeline] plan to "plans/{written.name}"'
    )
