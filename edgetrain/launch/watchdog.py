"""The run's watchdog: a silent wait becomes an event naming what the run waits on.

Start-up (workers launching and loading their data and model, the coordinator's
``registering`` phase) is a phase the live view shows with its time, not a stall: it takes
15-20 s on two cores, longer on small devices. So the watchdog warns about it only past
``startup_after_s``; waits after that (a barrier, the drain) get a warning after ``after_s``.
Either warning is repeated every ``every_s`` while the wait lasts.
"""

from __future__ import annotations

import logging
from typing import Protocol

from edgetrain.comm.control import Event

log = logging.getLogger(__name__)

STARTUP_PHASE = "registering"


class Stalls(Protocol):
    """What the watchdog reads of the coordinator."""

    @property
    def phase(self) -> str: ...

    def stall(self, now: float) -> tuple[float, str] | None: ...


def warn_after(phase: str, after_s: float, startup_after_s: float) -> float:
    """Seconds of waiting in ``phase`` before a warning. Pure."""
    return max(after_s, startup_after_s) if phase == STARTUP_PHASE else after_s


class Watchdog:
    """Turns a silent wait into a ``waiting`` event (with the ``phase`` it happened in), now
    and then."""

    def __init__(self, after_s: float, every_s: float, startup_after_s: float) -> None:
        self.after_s = after_s
        self.every_s = every_s
        self.startup_after_s = startup_after_s
        self._last = 0.0

    def check(self, coord: Stalls, now: float) -> Event | None:
        stall = coord.stall(now)
        if stall is None or now - self._last < self.every_s:
            return None
        if stall[0] < warn_after(coord.phase, self.after_s, self.startup_after_s):
            return None
        self._last = now
        log.warning("%s", stall[1])
        data = {"message": stall[1], "waited_s": round(stall[0], 1), "phase": coord.phase}
        return Event(None, "waiting", data)
