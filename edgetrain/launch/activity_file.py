"""``RUN/metrics/activity.json``: what each worker's last heartbeat said it was doing (its phase,
and while it waits: on whom, for what, for how long), rewritten by the launcher at most once a
second while the run goes, for ``edgetrain status RUN``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgetrain.comm.activity import ACTIVITY_JSON
from edgetrain.rundir import atomic_write_json

EVERY_S = 1.0


def activity_doc(workers: Mapping[int, Any], now: float) -> dict[str, Any]:
    """The file's content from the coordinator's workers (``activity``, ``activity_at``). Pure."""
    out: dict[str, Any] = {}
    for wid, info in sorted(workers.items()):
        doing, at = getattr(info, "activity", None), getattr(info, "activity_at", None)
        if doing is None or at is None:
            continue
        out[str(wid)] = {**doing, "heard_s_ago": round(max(0.0, now - at), 1)}
    return {"t": now, "workers": out}


class ActivityFile:
    """Rewrites the file from the coordinator at most every ``every_s`` seconds."""

    def __init__(self, metrics_dir: Path, every_s: float = EVERY_S) -> None:
        self.path = metrics_dir / ACTIVITY_JSON
        self.every_s = every_s
        self._last = 0.0

    def update(self, workers: Mapping[int, Any]) -> None:
        now = time.time()
        if now - self._last < self.every_s:
            return
        self._last = now
        doc = activity_doc(workers, now)
        if doc["workers"]:
            with contextlib.suppress(OSError):  # a status aid: never a reason to stop a run
                atomic_write_json(self.path, doc)
