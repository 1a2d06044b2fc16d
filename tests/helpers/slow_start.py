"""A worker whose set-up is slow the way a CUDA initialisation is: right after it learns the
recipe (where :func:`edgetrain.runtime.determinism.apply` runs, before its role's set-up), its
main thread sleeps in C while holding the interpreter lock, so its heartbeat thread falls
silent too, for ``EDGETRAIN_TEST_SLOW_START_S`` seconds.

Loaded into workers through ``EDGETRAIN_PLUGINS=tests.helpers.slow_start`` (it adds nothing to
the registry). Before the hold it writes one line to standard error (the worker's log) with the
``CUBLAS_WORKSPACE_CONFIG`` its environment had from the launcher.
"""

from __future__ import annotations

import ctypes
import os
import sys

from edgetrain.runtime import determinism

HOLD_ENV = "EDGETRAIN_TEST_SLOW_START_S"
MARK = "slow start:"


def _slow_apply(deterministic: bool, workspace: str = "default") -> bool:
    seconds = int(os.environ.get(HOLD_ENV, "0"))
    seen = os.environ.get(determinism.CUBLAS_ENV, "-")
    print(f"{MARK} holding the interpreter lock for {seconds} s; cublas {seen}", file=sys.stderr)
    sys.stderr.flush()
    ctypes.PyDLL(None).sleep(seconds)  # PyDLL: the call keeps the interpreter lock
    return _apply(deterministic, workspace)


_apply = determinism.apply
if sys.argv[1:2] == ["worker"]:
    determinism.apply = _slow_apply
