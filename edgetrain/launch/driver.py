"""The run driver: hosts the coordinator, starts and watches the workers, records everything.

It never prints: it writes the run directory and hands events to an observer (the CLI's live
progress). Whatever happens (success, a failed worker, Ctrl-C), the manifest records the
status, and every worker process is gone when :func:`run` returns.
"""

from __future__ import annotations

import logging
import platform
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import edgetrain
from edgetrain.comm.coordinator import Coordinator, Event, Resume
from edgetrain.comm.security import CurveKeys
from edgetrain.errors import RunError
from edgetrain.launch.base import Launcher, WorkerSpec
from edgetrain.launch.hosts import Placement
from edgetrain.launch.supervisor import Supervisor
from edgetrain.recipe import Recipe
from edgetrain.rundir import (
    COORDINATOR_STEM,
    JsonlWriter,
    RunDir,
    atomic_write_text,
    git_revision,
    now_iso,
    worker_stem,
)

if TYPE_CHECKING:
    from edgetrain.data import Dataset

log = logging.getLogger(__name__)


class Observer(Protocol):
    """Receives every event of a run as it happens (``t`` = seconds since the start)."""

    def on_event(self, event: Event, t: float) -> None: ...


@dataclass(frozen=True)
class LaunchOptions:
    bind_host: str = "127.0.0.1"
    announce_host: str | None = None
    register_timeout_s: float = 300.0
    stop_timeout_s: float = 30.0
    poll_ms: int = 200
    watchdog_after_s: float = 10.0
    watchdog_every_s: float = 30.0
    # CURVE (recipe ``security = "curve"``): the run's keys, and the keys directory workers
    # are told to read (the same path on every host).
    keys: CurveKeys | None = None
    keys_dir: Path | None = None


@dataclass
class RunOutcome:
    status: str  # completed, failed, interrupted
    error: str | None
    summary: dict[str, Any]


def _versions() -> dict[str, str]:
    import numpy
    import torch
    import zmq

    return {
        "edgetrain": edgetrain.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
    }


def initial_manifest(recipe: Recipe, run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "name": recipe.run.name,
        "status": "starting",
        "error": None,
        "seed": recipe.run.seed,
        "start_time": now_iso(),
        "end_time": None,
        "wall_s": None,
        "launcher_host": socket.gethostname(),
        "hosts": sorted({g.host for g in recipe.workers}),
        "command": sys.argv,
        "git_revision": git_revision(),
        "versions": _versions(),
        "recipe": recipe.to_dict(),
        "workers": [
            {
                "id": i,
                "host": g.host,
                "slowdown": g.slowdown,
                "threads": g.threads,
                "pid": None,
                "status": "pending",
            }
            for i, g in enumerate(recipe.expanded_workers())
        ],
    }


class _Recorder:
    """Writes events to ``metrics/<worker>.jsonl`` and forwards them to the observer."""

    def __init__(self, run_dir: RunDir, num_workers: int, observer: Observer | None) -> None:
        self.t0 = time.monotonic()
        self.observer = observer
        self.files = {
            i: JsonlWriter(run_dir.metrics_file(worker_stem(i))) for i in range(num_workers)
        }
        self.files[-1] = JsonlWriter(run_dir.metrics_file(COORDINATOR_STEM))

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def record(self, event: Event) -> None:
        t = event.at - self.t0
        if event.kind != "progress":  # progress is for the live view only
            row = {"t": round(t, 4), "event": event.kind}
            if event.worker >= 0:
                row["worker"] = event.worker
            self.files[event.worker].write({**event.data, **row})  # ours win over a peer's keys
        if self.observer is not None:
            self.observer.on_event(event, t)

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def preflight(recipe: Recipe) -> Dataset:
    """Check on this machine, before anything starts, that the data loads, splits across the
    workers and fits the model. Raises :class:`~edgetrain.errors.EdgetrainError` (exit 2)."""
    from edgetrain.worker.setup import build_run_model, load_run_data, partitions

    data = load_run_data(recipe)
    partitions(recipe, data)
    build_run_model(recipe, data)
    return data


def _evaluate_average(recipe: Recipe, data: Dataset, coord: Coordinator) -> dict[str, Any]:
    """Evaluate the alpha-weighted average of the workers' final weights on the test split."""
    import torch

    from edgetrain.gossip.mixing import weighted_average
    from edgetrain.worker.setup import build_run_model
    from edgetrain.worker.trainer import evaluate

    finals = [coord.finals[i] for i in sorted(coord.finals)]
    avg = weighted_average([(f.alpha, f.weights) for f in finals])
    model = build_run_model(recipe, data)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in avg.items()}, strict=False)
    acc, loss = evaluate(model, torch.from_numpy(data.x_test), torch.from_numpy(data.y_test))
    return {
        "test_accuracy": acc,
        "test_loss": loss,
        "workers": len(finals),
        "alpha_sum": sum(f.alpha for f in finals),
    }


def _worker_specs(
    recipe: Recipe,
    run_dir: RunDir,
    endpoint: str,
    run_id: str,
    opts: LaunchOptions,
    launcher: Launcher | None = None,
) -> list[WorkerSpec]:
    placements: list[Placement] | None = getattr(launcher, "placements", None)
    specs = []
    for i, g in enumerate(recipe.expanded_workers()):
        place = placements[i] if placements else None
        host = place.host if place else g.host
        bind = place.bind if place else opts.bind_host
        announce = ("--announce", place.announce) if place and place.announce != bind else ()
        args = (
            "worker",
            "--coordinator",
            endpoint,
            "--worker-id",
            str(i),
            "--run-id",
            run_id,
            "--host-label",
            host,
            "--bind",
            bind,
            *announce,
            *(("--keys", str(opts.keys_dir)) if opts.keys is not None else ()),
        )
        env = {"OMP_NUM_THREADS": str(g.threads), "MKL_NUM_THREADS": str(g.threads)}
        specs.append(WorkerSpec(i, host, args, run_dir.log_file(worker_stem(i)), env))
    return specs


def _before_workers(
    launcher: Launcher, endpoint: str, manifest: dict[str, Any], run_dir: RunDir
) -> None:
    """Launcher hook once the coordinator is bound: record where workers run, check the hosts
    (an ssh launcher checks the coordinator's port from each host)."""
    placements: list[Placement] | None = getattr(launcher, "placements", None)
    if placements:
        for w, place in zip(manifest["workers"], placements, strict=True):
            w.update(host=place.host, site=place.site, labels=list(place.labels))
        manifest["hosts"] = sorted({p.host for p in placements})
        run_dir.write_manifest(manifest)
    hosts_text: str | None = getattr(launcher, "hosts_text", None)
    if hosts_text is not None:
        atomic_write_text(run_dir.path / "hosts.toml", hosts_text)
    preflight_hook: Callable[[str], None] | None = getattr(launcher, "preflight", None)
    if preflight_hook is not None:
        preflight_hook(endpoint)


def _after_workers(launcher: Launcher) -> None:
    """Launcher hook once every worker is stopped (an ssh launcher drains logs, remote kills)."""
    close: Callable[[], None] | None = getattr(launcher, "close", None)
    if close is not None:
        close()


def _check_workers(coord: Coordinator, sup: Supervisor, events: list[Event]) -> list[Event]:
    """Mark failed every worker that reported an error or whose process exited early."""
    out: list[Event] = []
    for wid, code in sup.newly_exited():
        if coord.workers[wid].status not in ("final", "failed"):
            out.extend(coord.mark_failed(wid, _describe_exit(code)))
    return out


def _apply_policy(
    coord: Coordinator,
    recipe: Recipe,
    run_dir: RunDir,
    started: float,
    opts: LaunchOptions,
) -> None:
    """Raise :class:`RunError` when the run cannot go on: too many failed workers, or workers
    that never registered."""
    failed = coord.failed
    limit = recipe.run.max_failed_fraction
    if failed and (coord.failed_fraction > limit or not coord.alive):
        details = "; ".join(
            f"{coord.workers[i].label}: {coord.workers[i].error} "
            f"(log: {run_dir.log_file(worker_stem(i))})"
            for i in failed
        )
        raise RunError(
            f"{len(failed)} of {coord.num_workers} workers failed "
            f"({coord.failed_fraction:.0%} > max_failed_fraction {limit:g}): {details}"
        )
    if coord.phase == "registering" and time.monotonic() - started > opts.register_timeout_s:
        missing = ", ".join(str(i) for i in coord.waiting_on())
        raise RunError(
            f"workers {missing} did not register within {opts.register_timeout_s:.0f} s "
            f"(logs: {run_dir.logs})"
        )


class _Watchdog:
    """Turns a silent wait into an event naming what the run waits on, now and then."""

    def __init__(self, after_s: float, every_s: float) -> None:
        self.after_s = after_s
        self.every_s = every_s
        self._last = 0.0

    def check(self, coord: Coordinator, now: float) -> Event | None:
        stall = coord.stall(now)
        if stall is None or stall[0] < self.after_s or now - self._last < self.every_s:
            return None
        self._last = now
        log.warning("%s", stall[1])
        return Event(-1, "waiting", {"message": stall[1], "waited_s": round(stall[0], 1)})


def _ignore_sigint() -> Callable[[], None]:
    """Ignore SIGINT until the returned function is called (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)

    return restore


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _worker_status(info_status: str, run_status: str) -> str:
    if info_status == "final":
        return "completed"
    if info_status == "failed":
        return "failed"
    return "interrupted" if run_status == "interrupted" else "incomplete"


def run(
    recipe: Recipe,
    recipe_text: str,
    run_dir: RunDir,
    launcher: Launcher,
    data: Dataset,
    observer: Observer | None = None,
    opts: LaunchOptions | None = None,
    resume: Resume | None = None,
) -> RunOutcome:
    """Run the recipe's workers to completion and write the run directory and its report.

    ``data`` is the run's dataset as :func:`preflight` loaded it; the averaged model is
    evaluated on its test split. With ``resume``, the run goes on in ``run_dir`` from that
    checkpoint: the manifest keeps the earlier attempts, metrics files are appended to."""
    from edgetrain.report.summary import write_report

    opts = opts or LaunchOptions()
    run_id = uuid.uuid4().hex[:16]
    manifest = _start_manifest(recipe, run_id, run_dir, resume)
    if resume is None:
        atomic_write_text(run_dir.recipe, recipe_text)
    run_dir.write_manifest(manifest)
    rec = _Recorder(run_dir, recipe.num_workers, observer)
    coord = Coordinator(
        run_id,
        recipe.to_dict(),
        recipe.num_workers,
        recipe.gossip.sync_epochs,
        opts.bind_host,
        opts.announce_host,
        heartbeat_s=recipe.run.heartbeat_s,
        resume=resume,
        security=opts.keys,
    )
    sup = Supervisor(launcher)
    watchdog = _Watchdog(opts.watchdog_after_s, opts.watchdog_every_s)
    status, error = "running", None
    try:
        started = time.monotonic()
        if resume is not None:
            rec.record(Event(-1, "resumed", {"epoch": resume.epoch}))
        _before_workers(launcher, coord.endpoint, manifest, run_dir)
        for spec in _worker_specs(recipe, run_dir, coord.endpoint, run_id, opts, launcher):
            handle = sup.start(spec)
            manifest["workers"][spec.worker_id]["pid"] = handle.pid
        manifest.update(status="running", coordinator=coord.endpoint)
        run_dir.write_manifest(manifest)
        while not coord.finished:
            events = coord.poll(opts.poll_ms)
            events.extend(_check_workers(coord, sup, events))
            for ev in events:
                rec.record(ev)
            _write_checkpoints(coord, run_dir, rec)
            if (ev_wait := watchdog.check(coord, time.monotonic())) is not None:
                rec.record(ev_wait)
            _apply_policy(coord, recipe, run_dir, started, opts)
        rec.record(Event(-1, "averaged", _evaluate_average(recipe, data, coord)))
        coord.stop_all()
        if not sup.wait_all(opts.stop_timeout_s):
            log.warning("some workers did not exit within %.0f s of stop", opts.stop_timeout_s)
        status = "completed"
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted by the user (Ctrl-C)"
    except RunError as exc:
        status, error = "failed", str(exc)
    except Exception as exc:
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        restore = _ignore_sigint()  # a second Ctrl-C must not cut the clean-up short
        coord.stop_all()
        sup.terminate_all()
        _after_workers(launcher)
        coord.close()
        rec.record(Event(-1, "end", {"status": status, "error": error}))
        rec.close()
        for w in manifest["workers"]:
            w["status"] = _worker_status(coord.workers[w["id"]].status, status)
            w["exit_code"] = sup.exit_codes.get(w["id"])
            w["error"] = coord.workers[w["id"]].error
        manifest.update(
            status=status,
            error=error,
            end_time=now_iso(),
            wall_s=round(rec.elapsed(), 3),
            coordinator_traffic=coord.traffic.as_dict(),
            failed_workers=coord.failed,
        )
        run_dir.write_manifest(manifest)
        restore()
    return RunOutcome(status, error, write_report(run_dir))


def _start_manifest(
    recipe: Recipe, run_id: str, run_dir: RunDir, resume: Resume | None
) -> dict[str, Any]:
    """A new manifest, or for a resumed run the old one with its last attempt kept."""
    fresh = initial_manifest(recipe, run_id)
    if resume is None:
        return fresh
    old = run_dir.read_manifest()
    attempts = list(old.get("attempts", []))
    attempts.append(
        {k: old.get(k) for k in ("run_id", "status", "error", "start_time", "end_time")}
    )
    return {**fresh, "attempts": attempts, "resumed_from_epoch": resume.epoch}


def _write_checkpoints(coord: Coordinator, run_dir: RunDir, rec: _Recorder) -> None:
    """Write every checkpoint the coordinator has completed, and drop it from memory."""
    from edgetrain.checkpoints import write_checkpoint

    for epoch in sorted(coord.checkpoints):
        folder = write_checkpoint(run_dir.path, epoch, coord.checkpoints.pop(epoch))
        rec.record(Event(-1, "checkpoint_written", {"epoch": epoch, "path": str(folder)}))
