"""Observers of a run's events: fan-out, and JSON lines for scripts and tests (``--events``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import IO

from edgetrain.comm.control import Event
from edgetrain.launch.driver import Observer, event_row


class JsonLines:
    """Writes each recorded event as one JSON line (the metrics files' rows), flushed at once.

    ``progress`` events are left out, as in the metrics files."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self._lock = threading.Lock()

    def on_event(self, event: Event, t: float) -> None:
        if event.kind == "progress":
            return
        self.write_row(event_row(event, t))

    def write_row(self, row: dict[str, object]) -> None:
        with self._lock:
            self.stream.write(json.dumps(row, separators=(",", ":")) + "\n")
            self.stream.flush()


class Fanout:
    """Hands every event to several observers, in order."""

    def __init__(self, observers: Sequence[Observer | None]) -> None:
        self.observers = [o for o in observers if o is not None]

    def on_event(self, event: Event, t: float) -> None:
        for obs in self.observers:
            obs.on_event(event, t)
