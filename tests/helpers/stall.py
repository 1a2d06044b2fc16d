"""A worker that stalls on demand while staying alive: SIGUSR2 makes its main thread sleep in
Python for ``EDGETRAIN_TEST_STALL_S`` seconds (default 8), releasing the interpreter lock, so
its heartbeats go on while its peers wait on it (``edgetrain status`` shows who waits on whom).

Loaded into workers through ``EDGETRAIN_PLUGINS=tests.helpers.stall`` (it adds nothing to the
registry)."""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType


def stall(signum: int, frame: FrameType | None) -> None:
    time.sleep(float(os.environ.get("EDGETRAIN_TEST_STALL_S", "8")))


if sys.argv[1:2] == ["worker"]:
    signal.signal(signal.SIGUSR2, stall)
