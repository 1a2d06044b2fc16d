"""The launcher's side of ``edgetrain join``: each poll, take the join requests left in the run
directory (:mod:`edgetrain.launch.join`), start each lost worker the verdict lets back with its
launch command, and answer."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from edgetrain.comm.control import Event
from edgetrain.comm.coordinator import Coordinator
from edgetrain.comm.rejoin import VACANT
from edgetrain.launch.base import WorkerSpec
from edgetrain.launch.join import take_requests, verdict, write_answer
from edgetrain.launch.restart import RestartBook
from edgetrain.launch.supervisor import Supervisor

log = logging.getLogger(__name__)


def serve_joins(
    run: Path,
    coord: Coordinator,
    sup: Supervisor,
    book: RestartBook,
    spec_for: Callable[[int, str | None], WorkerSpec],
    hosts: Sequence[str],
    manifest: dict[str, Any],
    *,
    rejoins: bool,
    what: str,
) -> list[Event]:
    """Serve the waiting join requests: ``spec_for(worker, host)`` is the worker's launch
    command (on ``host``; None: where it ran); ``hosts``, where it may start; ``rejoins``:
    whether the technique (``what``) takes a worker back. A started worker is a ``restarted``
    event with ``by = "join"``; a refused request, ``join_refused``."""
    out: list[Event] = []
    for req in take_requests(run, len(coord.workers)):
        w = req.worker
        info = coord.workers[w]
        refusal = verdict(
            w,
            rejoins=rejoins,
            what=what,
            phase=coord.phase,
            status=info.status,
            error_kind=info.error_kind,
            mending=w in book.mending,
            running=w in sup.handles and w not in sup.exit_codes,
            host=req.host,
            hosts=hosts,
            path=str(run),
        )
        if refusal is not None:
            write_answer(run, req, {"accepted": False, "error": refusal.reason, "fix": refusal.fix})
            out.append(Event(w, "join_refused", {"reason": refusal.reason, "host": req.host}))
            continue
        spec = spec_for(w, req.host)
        try:
            handle = sup.start(spec)
        except OSError as exc:
            reason = f"cannot start worker {w} on {spec.host}: {exc.strerror or exc}"
            write_answer(run, req, {"accepted": False, "error": reason, "fix": "check the host"})
            out.append(Event(w, "join_refused", {"reason": reason, "host": spec.host}))
            continue
        sup.exit_codes.pop(w, None)
        joins = book.joined(w)
        new = info.error_kind == VACANT  # a new worker in an open slot ([run] join_slots)
        row = manifest["workers"][w]
        row.update(pid=handle.pid, host=spec.host, joins=joins)
        if new:
            row["status"] = "joining"
        what = "a new worker started" if new else "started again"
        log.info("worker %d: %s by edgetrain join on %s", w, what, spec.host)
        data = {"by": "join", "pid": handle.pid, "host": spec.host, "spawned_at": time.time()}
        out.append(Event(w, "restarted", {**data, "new": True} if new else data))
        answer = {"accepted": True, "worker": w, "host": spec.host, "pid": handle.pid, "new": new}
        write_answer(run, req, answer)
    return out
