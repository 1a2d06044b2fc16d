"""A worker that hangs on demand, the way a stuck native call does: SIGUSR2 makes its main
thread sleep in C while holding the interpreter lock, so its heartbeat thread falls silent too.

Loaded into workers through ``EDGETRAIN_PLUGINS=tests.helpers.hang`` (it adds nothing to the
registry). SIGUSR1 (the launcher's request for stacks) still gets answered: faulthandler dumps
from C. SIGTERM ends the hang: the sleep returns, the loop checks Python's pending signals.
"""

from __future__ import annotations

import ctypes
import signal
import sys
from types import FrameType

HANG_SIGNAL = signal.SIGUSR2


def hang_holding_the_gil(signum: int, frame: FrameType | None) -> None:
    libc = ctypes.PyDLL(None)  # PyDLL: the call keeps the interpreter lock
    while True:
        libc.sleep(600)


if sys.argv[1:2] == ["worker"]:
    signal.signal(HANG_SIGNAL, hang_holding_the_gil)
