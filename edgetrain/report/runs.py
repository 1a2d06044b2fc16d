"""Runs as the watching commands see them (``edgetrain runs``, ``status``, ``logs``): read-only
views of run directories, a run in progress included.

The run directory is the source of truth. A manifest whose status is still ``starting`` or
``running`` belongs to a live run only while its launcher lives: the manifest records the
launcher's host and pid, and a launcher on this host whose pid is gone died without writing
the manifest's last word, so the run counts as ``interrupted``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from edgetrain.rundir import COORDINATOR_STEM, MANIFEST, RunDir, read_jsonl, worker_stem

LIVE_STATUSES = ("starting", "running")
# Events that open an attempt's rows in an appended metrics file (see report.summary).
_OPENERS = ("registered", "resumed", "started")
_MODEL_EVENTS = ("averaged", "final_model")


def pid_alive(pid: int) -> bool:
    """True if a process ``pid`` exists on this host (one of another user's counts too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def launcher_alive(manifest: dict[str, Any]) -> bool | None:
    """Whether the run's launcher still runs: None where this host cannot tell (a launcher on
    another host, or a manifest written before launchers recorded their pid)."""
    pid = manifest.get("launcher_pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return None
    host = manifest.get("launcher_host")
    if host is not None and host != socket.gethostname():
        return None
    return pid_alive(pid)


def run_status(manifest: dict[str, Any]) -> tuple[str, str | None]:
    """The run's status (``running``, ``completed``, ``failed``, ``diverged``,
    ``interrupted``, ...) and why, where the manifest alone would mislead."""
    status = str(manifest.get("status") or "unknown")
    if status not in LIVE_STATUSES:
        return status, manifest.get("error")
    if launcher_alive(manifest) is False:
        pid = manifest.get("launcher_pid")
        return "interrupted", f"its launcher (pid {pid}) is gone; it never recorded an end"
    return "running", None


def ended(manifest: dict[str, Any]) -> bool:
    """True once the run is over: the manifest says so, or its launcher died."""
    return run_status(manifest)[0] != "running"


def total_epochs(manifest: dict[str, Any]) -> int | None:
    extended = manifest.get("extended_epochs")
    if isinstance(extended, int):
        return extended
    recipe = manifest.get("recipe")
    train = recipe.get("train") if isinstance(recipe, dict) else None
    epochs = train.get("epochs") if isinstance(train, dict) else None
    return epochs if isinstance(epochs, int) else None


def unix_time(iso: object) -> float | None:
    """An ISO 8601 time (a manifest's) as Unix seconds, or None."""
    if not isinstance(iso, str):
        return None
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def _wall_s(manifest: dict[str, Any], status: str) -> float | None:
    wall = manifest.get("wall_s")
    if isinstance(wall, (int, float)):
        return float(wall)
    start = unix_time(manifest.get("start_time"))
    if start is None:
        return None
    if status == "running":
        return round(time.time() - start, 1)
    end = unix_time(manifest.get("end_time"))
    return round(end - start, 1) if end is not None else None


def current_rows(rows: list[dict[str, Any]], run_id: object) -> list[dict[str, Any]]:
    """The rows the current attempt (``run_id``) wrote to an appended metrics file."""
    if not isinstance(run_id, str):
        return rows
    for i, row in enumerate(rows):
        if row.get("event") in _OPENERS and row.get("run_id") == run_id:
            return rows[i:]
    return []


def _last(rows: list[dict[str, Any]], *kinds: str) -> dict[str, Any] | None:
    row: dict[str, Any]
    for row in reversed(rows):
        if row.get("event") in kinds:
            return row
    return None


def _int(x: object) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _float(x: object) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _workers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    workers = manifest.get("workers")
    if not isinstance(workers, list):
        return []
    return [w for w in workers if isinstance(w, dict) and _int(w.get("id")) is not None]


def _epochs_done(rd: RunDir, manifest: dict[str, Any]) -> int:
    """The furthest epoch any worker reported (every attempt of a resumed run)."""
    done = 0
    for w in _workers(manifest):
        last = _last(read_jsonl(rd.metrics_file(worker_stem(w["id"]))), "epoch")
        if last is not None:
            done = max(done, _int(last.get("epoch")) or 0)
    return done


def _final_accuracy(rd: RunDir) -> float | None:
    """The final (gossip: averaged) model's test accuracy, once the run measured it."""
    try:
        summary = json.loads((rd.report / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        summary = None
    if isinstance(summary, dict) and _float(summary.get("test_accuracy")) is not None:
        return _float(summary["test_accuracy"])
    model = _last(read_jsonl(rd.metrics_file(COORDINATOR_STEM)), *_MODEL_EVENTS)
    return _float(model.get("test_accuracy")) if model else None


def run_row(rd: RunDir) -> dict[str, Any]:
    """One line of ``edgetrain runs``: a run, or an ``unreadable`` one and the reason."""
    try:
        manifest = rd.read_manifest()
    except Exception as exc:  # noqa: BLE001 - an unreadable manifest is listed, never raised
        problem = getattr(exc, "problem", None) or str(exc)
        return {"path": str(rd.path), "status": "unreadable", "reason": problem}
    status, reason = run_status(manifest)
    return {
        "name": manifest.get("name"),
        "run_id": manifest.get("run_id"),
        "status": status,
        "reason": reason,
        "family": manifest.get("family"),
        "technique": manifest.get("technique"),
        "epochs_done": _epochs_done(rd, manifest),
        "epochs": total_epochs(manifest),
        "test_accuracy": _final_accuracy(rd),
        "wall_s": _wall_s(manifest, status),
        "start_time": manifest.get("start_time"),
        "path": str(rd.path),
    }


def list_runs(root: Path) -> list[dict[str, Any]]:
    """Every run directly under ``root``, newest first (by the manifest's start time, else
    the directory's modification time); a directory with no manifest is not a run."""
    found: list[tuple[float, str, dict[str, Any]]] = []
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return []
    for child in children:
        if not (child / MANIFEST).exists():
            continue
        row = run_row(RunDir(child))
        key = unix_time(row.get("start_time"))
        if key is None:
            try:
                key = child.stat().st_mtime
            except OSError:
                key = 0.0
        found.append((key, child.name, row))
    found.sort(key=lambda t: (t[0], t[1]), reverse=True)
    return [row for _, _, row in found]


@dataclass
class WorkerState:
    id: int
    role: str
    host: str
    state: str
    epoch: int | None = None
    loss: float | None = None
    accuracy: float | None = None
    reported_s_ago: float | None = None
    # its last heartbeat's record while the run goes: phase, and on whom / for what / for
    # how long it waits (:mod:`edgetrain.comm.activity`), with heard_s_ago
    doing: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "role": self.role,
            "host": self.host,
            "state": self.state,
            "epoch": self.epoch,
            "loss": self.loss,
            "test_accuracy": self.accuracy,
            "reported_s_ago": self.reported_s_ago,
            "doing": self.doing,
        }


def membership_text(m: dict[str, Any]) -> str:
    """``worker 2 left at 12.3 s: was killed by SIGKILL``, ``worker 2 joined at 20.1 s
    (epoch 5)``: one leave or join of the manifest's ``membership``. Pure."""
    line = f"worker {m.get('worker')} {m.get('event')} at {m.get('t')} s"
    if m.get("attempt") is not None:
        line += f" (restart {m['attempt']})"
    if m.get("by") == "join":
        new = " (a new worker, in an open slot)" if m.get("new") else ""
        line += f" by edgetrain join on {m.get('host')}{new}"
    if m.get("epoch") is not None:
        line += f" (epoch {m['epoch']})"
    if m.get("reason"):
        line += f": {m['reason']}"
    return line


def _rejoined_state(rows: list[dict[str, Any]], state: str) -> str:
    """A worker lost and restarted (``[run] restart``): its state since its last leave."""
    kinds = [r.get("event") for r in rows]
    if "failed" not in kinds:
        return state
    after = kinds[len(kinds) - kinds[::-1].index("failed") :]
    if "restarted" not in after and "rejoining" not in after:
        return state
    for kind, name in (("joined", "training (rejoined)"), ("done", "draining"), ("final", "done")):
        if kind in after:
            state = name
    return state if "joined" in after else "rejoining"


def _worker_state(
    rd: RunDir, worker: dict[str, Any], run_id: object, live: bool, now: float
) -> WorkerState:
    path = rd.metrics_file(worker_stem(worker["id"]))
    rows = read_jsonl(path)
    mine = current_rows(rows, run_id)
    registered = _last(mine, "registered")
    host = str((registered or {}).get("host") or worker.get("host") or "?")
    state = "starting"
    for kind, name in (
        ("registered", "registered"),
        ("ready", "ready"),
        ("epoch", "training"),
        ("done", "draining"),
        ("final", "done"),
    ):
        if _last(mine, kind) is not None:
            state = name
    failed = _last(mine, "error", "failed")
    if failed is not None:
        state = f"failed: {failed.get('message') or failed.get('reason') or 'no reason given'}"
    state = _rejoined_state(mine, state)
    events = {r.get("event") for r in mine}
    if events == {"vacant"} or (not events and worker.get("status") == "vacant"):
        state = "open slot"  # [run] join_slots: nobody has joined it
    if not live:
        state = str(worker.get("status") or state)
    epoch_row = _last(rows, "epoch")
    final = _last(mine, "final")
    accuracy = _float(final.get("final_test_accuracy")) if final else None
    if accuracy is None:
        evaluated = [r for r in rows if r.get("event") == "epoch" and "test_accuracy" in r]
        accuracy = _float(evaluated[-1]["test_accuracy"]) if evaluated else None
    ago: float | None = None
    if rows:
        try:
            ago = round(max(0.0, now - path.stat().st_mtime), 1)
        except OSError:
            ago = None
    return WorkerState(
        id=worker["id"],
        role=str(worker.get("role") or "trainer"),
        host=host,
        state=state,
        epoch=_int(epoch_row.get("epoch")) if epoch_row else None,
        loss=_float(epoch_row.get("loss")) if epoch_row else None,
        accuracy=accuracy,
        reported_s_ago=ago,
    )


@dataclass
class RunState:
    path: Path
    manifest: dict[str, Any]
    status: str
    reason: str | None
    phase: str
    epochs: int | None
    workers: list[WorkerState] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "path": str(self.path),
            "name": m.get("name"),
            "run_id": m.get("run_id"),
            "status": self.status,
            "reason": self.reason,
            "phase": self.phase,
            "family": m.get("family"),
            "technique": m.get("technique"),
            "epochs": self.epochs,
            "start_time": m.get("start_time"),
            "wall_s": _wall_s(m, self.status),
            "launcher_host": m.get("launcher_host"),
            "launcher_pid": m.get("launcher_pid"),
            "workers": [w.as_dict() for w in self.workers],
            # [run] restart: every leave and join, with seconds since the start
            "membership": m.get("membership", []),
        }


def _phase(
    status: str, coordinator: list[dict[str, Any]], workers: list[WorkerState], epochs: int | None
) -> str:
    if status != "running":
        return "done"
    if _last(coordinator, "started") is None:
        return "starting"
    trainers = [w for w in workers if w.epoch is not None or w.state == "training"]
    if _last(coordinator, "draining", "finished") is not None or (
        trainers and all(w.state in ("draining", "done") for w in trainers)
    ):
        return "draining"
    resumed = _last(coordinator, "resumed")
    done = max([w.epoch or 0 for w in workers] + [_int((resumed or {}).get("epoch")) or 0])
    current = done + 1 if epochs is None else min(done + 1, epochs)
    return f"training epoch {current} of {epochs if epochs is not None else '?'}"


def run_state(rd: RunDir) -> RunState:
    """One run in detail: its status and phase, and per worker what it last reported."""
    manifest = rd.read_manifest()
    status, reason = run_status(manifest)
    run_id = manifest.get("run_id")
    now = time.time()
    live = status == "running"
    workers = [_worker_state(rd, w, run_id, live, now) for w in _workers(manifest)]
    if live:
        workers = _with_activity(workers, rd, now)
    coordinator = current_rows(read_jsonl(rd.metrics_file(COORDINATOR_STEM)), run_id)
    epochs = total_epochs(manifest)
    return RunState(
        rd.path,
        manifest,
        status,
        reason,
        _phase(status, coordinator, workers, epochs),
        epochs,
        workers,
    )


def _with_activity(workers: list[WorkerState], rd: RunDir, now: float) -> list[WorkerState]:
    """``workers`` with what ``RUN/metrics/activity.json`` says each is doing, its ages taken
    to ``now`` (the launcher rewrites the file every second while the run goes)."""
    from dataclasses import replace

    from edgetrain.comm.activity import ACTIVITY_JSON

    try:
        doc = json.loads((rd.metrics / ACTIVITY_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return workers
    seen = doc.get("workers") if isinstance(doc, dict) else None
    written = _float(doc.get("t")) if isinstance(doc, dict) else None
    if not isinstance(seen, dict) or written is None:
        return workers
    late = max(0.0, now - written)
    out = []
    for w in workers:
        entry = seen.get(str(w.id))
        if isinstance(entry, dict) and isinstance(entry.get("phase"), str):
            doing: dict[str, Any] = {
                k: entry[k] for k in ("phase", "on", "what") if isinstance(entry.get(k), str)
            }
            heard = (_float(entry.get("heard_s_ago")) or 0.0) + late
            doing["heard_s_ago"] = round(heard, 1)
            waited = _float(entry.get("for_s"))
            if waited is not None and "on" in doing:
                doing["for_s"] = round(waited + heard, 1)
            w = replace(w, doing=doing)
        out.append(w)
    return out


def worker_ids(manifest: dict[str, Any]) -> list[int]:
    return [int(w["id"]) for w in _workers(manifest)]


class LogTail:
    """Reads the new complete lines of a set of log files, each from where it last stopped
    (a file that does not exist yet is read once it appears)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files
        self.offsets = dict.fromkeys(files, 0)
        self.partial = dict.fromkeys(files, b"")

    def read(self, final: bool = False) -> list[tuple[str, str]]:
        """``(label, line)`` for every line written since the last call, file by file; with
        ``final`` an unterminated last line too."""
        out: list[tuple[str, str]] = []
        for label, path in self.files.items():
            try:
                with path.open("rb") as fh:
                    fh.seek(self.offsets[label])
                    data = fh.read()
            except OSError:
                continue
            self.offsets[label] += len(data)
            data = self.partial[label] + data
            lines = data.split(b"\n")
            rest = lines.pop()  # after the last newline: a line still being written
            if final and rest:
                lines.append(rest)
                rest = b""
            self.partial[label] = rest
            for line in lines:
                out.append((label, line.decode("utf-8", errors="replace").rstrip("\r")))
        return out
