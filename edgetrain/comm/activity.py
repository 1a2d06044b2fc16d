"""What this worker process is doing now, for its heartbeats: its phase (``setup``,
``training``, ``draining``, ...) and, while it waits, on whom, for what, since when.

One process-wide record, set by the code that waits (the coordinator client's waits, a gossip
worker's wait for its peers' gradients, a pipeline stage's wait for its neighbour) and read by
the heartbeat thread, which sends it to the coordinator; the launcher writes what it hears to
``RUN/live/activity.json`` and ``edgetrain status RUN`` shows it per worker. Cheap: setting it
is a few assignments under a lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

ACTIVITY_JSON = "activity.json"  # in RUN/metrics/, written by the launcher
MAX_TEXT = 60  # characters of a phase, a peer or a what: a heartbeat stays small

_lock = threading.Lock()
_phase = "setup"
_wait: tuple[str, str, float] | None = None  # on whom, for what, since (monotonic)


def set_phase(name: str) -> None:
    """The process entered phase ``name`` (any wait ends)."""
    global _phase, _wait
    with _lock:
        _phase, _wait = name[:MAX_TEXT], None


@contextmanager
def waiting(on: str, what: str) -> Iterator[None]:
    """While the block runs, this process waits on ``on`` (a worker, a stage, the
    coordinator) for ``what``; a wait inside another keeps the outer one's start."""
    global _wait
    with _lock:
        outer = _wait
        _wait = (on[:MAX_TEXT], what[:MAX_TEXT], outer[2] if outer else time.monotonic())
    try:
        yield
    finally:
        with _lock:
            _wait = outer


def snapshot(now: float | None = None) -> dict[str, Any]:
    """The record as a heartbeat carries it: ``{"phase", "on", "what", "for_s"}`` (the last
    three only while waiting)."""
    with _lock:
        phase, wait = _phase, _wait
    out: dict[str, Any] = {"phase": phase}
    if wait is not None:
        on, what, since = wait
        out.update(on=on, what=what, for_s=round((now or time.monotonic()) - since, 2))
    return out


def parse(value: Any) -> dict[str, Any] | None:
    """A heartbeat's record as the coordinator keeps it, or None when it is not one (nothing
    from the network is trusted: strings cut to :data:`MAX_TEXT`, a finite wait)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("phase"), str):
        return None
    out: dict[str, Any] = {"phase": value["phase"][:MAX_TEXT]}
    on, what, for_s = value.get("on"), value.get("what"), value.get("for_s")
    if isinstance(for_s, bool) or not isinstance(for_s, (int, float)):
        return out
    if isinstance(on, str) and isinstance(what, str) and 0 <= float(for_s) < 1e7:
        out.update(on=on[:MAX_TEXT], what=what[:MAX_TEXT], for_s=float(for_s))
    return out
