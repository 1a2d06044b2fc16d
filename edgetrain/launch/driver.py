"""The run driver: hosts the coordinator, starts and watches the workers, records everything.

It is the same for every family: the family gives the coordination policy and controller,
combines the final hand-ins into the run's model and decides nothing else here. The driver
never prints: it writes the run directory and hands events to an observer (the CLI's live
progress, ``--events``). Whatever happens (success, a failed worker, a diverged loss, Ctrl-C or
SIGTERM, twice), the manifest records the status, and every worker process is gone when
:func:`run` returns.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from edgetrain.comm.control import Event, HandIn, Role
from edgetrain.comm.coordinator import Coordinator, Resume
from edgetrain.comm.protocol import new_secret
from edgetrain.comm.security import CurveKeys
from edgetrain.comm.wire import Limits
from edgetrain.envinfo import versions
from edgetrain.errors import EdgetrainError, RunError
from edgetrain.launch.activity_file import ActivityFile
from edgetrain.launch.base import Launcher, WorkerSpec
from edgetrain.launch.hosts import Placement
from edgetrain.launch.join_serve import serve_joins
from edgetrain.launch.restart import (
    RestartBook,
    rejoin_blocker,
    restarted_roles,
    technique_rejoins,
)
from edgetrain.launch.run_inputs import RunInputs
from edgetrain.launch.slots import VACANT, vacant_workers
from edgetrain.launch.supervisor import Supervisor
from edgetrain.launch.watchdog import Watchdog
from edgetrain.recipe import Recipe
from edgetrain.rundir import (
    COORDINATOR_STEM,
    JsonlWriter,
    RunDir,
    atomic_write_json,
    atomic_write_text,
    git_revision,
    now_iso,
    worker_stem,
)
from edgetrain.runtime import determinism

if TYPE_CHECKING:
    from edgetrain.data import Dataset
    from edgetrain.runtime.base import Family

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
    # start-up is a phase the live view shows; it is a warning only past this (watchdog.py)
    startup_warn_after_s: float = 120.0
    # CURVE (recipe ``security = "curve"``): the run's keys, and the keys directory workers
    # are told to read (the same path on every host).
    keys: CurveKeys | None = None
    keys_dir: Path | None = None


@dataclass
class RunOutcome:
    status: str  # completed, failed, diverged, interrupted
    error: str | None
    summary: dict[str, Any]


@dataclass
class RunSetup:
    """Everything a run needs, checked and prepared before anything starts
    (:func:`edgetrain.launch.api.prepare`)."""

    recipe: Recipe
    recipe_text: str
    run_dir: RunDir
    launcher: Launcher
    data: Dataset
    family: Family
    roles: list[Role]
    slots: list[int] | None = None  # each worker's host slot (a launcher with hosts)
    opts: LaunchOptions = LaunchOptions()
    resume: Resume | None = None
    fresh: bool = False  # the run directory was made for this launch (nothing else in it)
    extended_epochs: int | None = None  # launch --resume --epochs N: the run's epochs now
    kept: Path | None = None  # where the completed result an extension overwrites was kept
    inputs: RunInputs | None = None  # a launch into RUN: what it read of other commands' files


def initial_manifest(recipe: Recipe, run_id: str, roles: Sequence[Role]) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "name": recipe.run.name,
        "status": "starting",
        "error": None,
        "family": recipe.train.family,
        "technique": recipe.train.technique,
        "seed": recipe.run.seed,
        "start_time": now_iso(),
        "end_time": None,
        "wall_s": None,
        "launcher_host": socket.gethostname(),
        "launcher_pid": os.getpid(),  # edgetrain runs/status: a live run or a dead launcher
        "hosts": sorted({g.host for g in recipe.workers}),
        "command": sys.argv,
        "git_revision": git_revision(),
        "versions": versions(),
        "recipe": recipe.to_dict(),
        "workers": [
            {
                "id": i,
                "role": role.name,
                "role_index": role.index,
                "host": g.host,
                "slowdown": g.slowdown,
                "threads": g.threads,
                "pid": None,
                "status": "pending",
            }
            for i, (g, role) in enumerate(zip(recipe.expanded_workers(), roles, strict=True))
        ],
    }


# Events that open an attempt's rows in a metrics file carry the attempt's run id, so a resumed
# run's appended files can be told apart (report.summary).
ATTEMPT_EVENTS = ("registered", "resumed", "started", "end")


class _Recorder:
    """Writes events to ``metrics/<worker>.jsonl`` and forwards them to the observer."""

    def __init__(
        self, run_dir: RunDir, num_workers: int, observer: Observer | None, run_id: str = ""
    ) -> None:
        self.t0 = time.monotonic()
        self.run_id = run_id
        self.observer = observer
        self.files: dict[int | None, JsonlWriter] = {
            i: JsonlWriter(run_dir.metrics_file(worker_stem(i))) for i in range(num_workers)
        }
        self.files[None] = JsonlWriter(run_dir.metrics_file(COORDINATOR_STEM))

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def record(self, event: Event) -> None:
        t = event.at - self.t0
        if event.kind in ATTEMPT_EVENTS:
            event.data.setdefault("run_id", self.run_id)
        if event.kind != "progress":  # progress is for the live view only
            self.files[event.worker].write(event_row(event, t))
        if self.observer is not None:
            self.observer.on_event(event, t)

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def event_row(event: Event, t: float) -> dict[str, Any]:
    """An event as a metrics row: its data, then ``t``, ``event`` and ``worker`` (ours win
    over a worker's keys of the same name)."""
    row: dict[str, Any] = {"t": round(t, 4), "event": event.kind}
    if event.worker is not None:
        row["worker"] = event.worker
    return {**event.data, **row}


def preflight(recipe: Recipe) -> Dataset:
    """Check on this machine, before anything starts, that the data loads, splits across the
    workers and fits the model. Raises :class:`~edgetrain.errors.EdgetrainError` (exit 2)."""
    from edgetrain.runtime.setup import build_run_model, load_run_data, partitions

    data = load_run_data(recipe)
    if recipe.num_data_workers:
        partitions(recipe, data)
    build_run_model(recipe, data)
    return data


def evaluate_weights(
    recipe: Recipe, data: Dataset, weights: Mapping[str, Any]
) -> tuple[float, float]:
    """Test accuracy and loss of the recipe's model holding ``weights``."""
    import torch

    from edgetrain.runtime.setup import build_run_model
    from edgetrain.runtime.trainer import evaluate

    model = build_run_model(recipe, data)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=False)
    return evaluate(model, torch.from_numpy(data.x_test), torch.from_numpy(data.y_test))


def _final_model(setup: RunSetup, finals: Mapping[int, HandIn]) -> Event:
    """The family's model from the final hand-ins, evaluated on the test split."""
    from edgetrain.runtime.model_file import write_final_model
    from edgetrain.runtime.weights import model_sha256

    final = setup.family.final_model(setup.recipe, finals, setup.roles)
    acc, loss = evaluate_weights(setup.recipe, setup.data, final.weights)
    data = {
        "test_accuracy": acc,
        "test_loss": loss,
        "model_sha256": model_sha256(final.weights),
        # RUN/model/final.safetensors and its sha256
        **write_final_model(setup.recipe, setup.data, final.weights, setup.run_dir.path),
        **final.info,
    }
    return Event(None, final.event, data)


def _worker_specs(
    setup: RunSetup,
    endpoint: str,
    run_id: str,
    placements: list[Placement] | None,
    secret: str = "",
    limits: Limits | None = None,
) -> list[WorkerSpec]:
    """Each worker's command; the run's ``secret`` goes to its standard input, not its argv."""
    return [
        _worker_spec(setup, i, endpoint, run_id, placements, secret, limits)
        for i in range(len(setup.roles))
    ]


def _worker_spec(
    setup: RunSetup,
    i: int,
    endpoint: str,
    run_id: str,
    placements: list[Placement] | None,
    secret: str = "",
    limits: Limits | None = None,
    slot: int | None = None,
) -> WorkerSpec:
    """Worker ``i``'s command, in its own host slot or in ``slot`` (``edgetrain join -H``)."""
    recipe, opts = setup.recipe, setup.opts
    g, role = recipe.expanded_workers()[i], setup.roles[i]
    if slot is None:
        slot = setup.slots[i] if setup.slots is not None else i
    place = placements[slot] if placements else None
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
        "--role",
        str(role),
        "--host-label",
        host,
        "--bind",
        bind,
        *announce,
        *(("--keys", str(opts.keys_dir)) if opts.keys is not None else ()),
        *(("--secret-stdin",) if secret else ()),
        *(limits.args() if limits is not None else ()),
    )
    env = {"OMP_NUM_THREADS": str(g.threads), "MKL_NUM_THREADS": str(g.threads)}
    env.update(determinism.environment(recipe.train.deterministic, recipe.train.blas_workspace))
    log_path = setup.run_dir.log_file(worker_stem(i))
    stdin = f"{secret}\n".encode() if secret else b""
    return WorkerSpec(i, host, args, log_path, env, slot if place else None, g.cpu, run_id, stdin)


def _placement_of(setup: RunSetup) -> dict[int, dict[str, Any]]:
    """Each worker's site and labels (a launcher with hosts), for the roster and manifest."""
    placements: list[Placement] | None = getattr(setup.launcher, "placements", None)
    if not placements:
        return {}
    slots = setup.slots if setup.slots is not None else list(range(len(setup.roles)))
    return {
        i: {"site": placements[k].site, "labels": list(placements[k].labels)}
        for i, k in enumerate(slots)
    }


def _before_workers(setup: RunSetup, endpoint: str, manifest: dict[str, Any]) -> None:
    """Launcher hook once the coordinator is bound: record where workers run, check the hosts
    (an ssh launcher checks the coordinator's port from each host)."""
    launcher, run_dir = setup.launcher, setup.run_dir
    placements: list[Placement] | None = getattr(launcher, "placements", None)
    if placements:
        slots = setup.slots if setup.slots is not None else list(range(len(placements)))
        for w, k in zip(manifest["workers"], slots, strict=True):
            place = placements[k]
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


def _dump_stacks(sup: Supervisor, worker_id: int) -> str | None:
    """Capture a silent worker's Python stacks before it is declared lost (a local worker's
    go to ``RUN/logs/worker-N.stacks``, a remote one's into its log); where they are, or None."""
    dump: Callable[[], str | None] | None = getattr(sup.handles.get(worker_id), "dump_stacks", None)
    return dump() if dump is not None else None


def _check_workers(
    coord: Coordinator,
    sup: Supervisor,
    restarts: RestartBook | None = None,
    roles: frozenset[str] | None = None,
) -> list[Event]:
    """Mark failed every worker whose process exited before it handed in; with ``restarts``
    (``[run] restart``), plan its restart while the run trains and its budget lasts, if its
    role is one of ``roles`` (None: any)."""
    out: list[Event] = []
    if restarts is not None and restarts.limit > 0 and coord.phase == "training":
        _end_lost(coord, sup, restarts.mending)
    for wid, code in sup.newly_exited():
        if coord.workers[wid].status not in ("final", "failed"):
            out.extend(coord.mark_failed(wid, _describe_exit(code)))
        info = coord.workers[wid]
        if restarts is None or info.status != "failed" or coord.phase != "training":
            continue
        if info.error_kind in NOT_RESTARTED or (roles is not None and info.role.name not in roles):
            continue
        delay = restarts.schedule(wid, time.monotonic())
        if delay is not None:
            left = restarts.limit - restarts.attempt(wid) - 1
            data = {"in_s": delay, "attempt": restarts.attempt(wid) + 1, "left": left}
            out.append(Event(wid, "restart_planned", data))
    return out


# How long the launcher waits for a lost worker's process to die of SIGKILL.
END_LOST_WAIT_S = 5.0


def _end_lost(coord: Coordinator, sup: Supervisor, mending: set[int]) -> None:
    """End the process of every worker the run lost while it still runs (silent past the
    heartbeat limit: hung, suspended, cut off), so that it can be restarted or joined now. Its
    stacks were captured before it was declared lost; it would only be told to stop when it
    speaks again, which a hung or suspended process never does (and a parameter-server trainer
    blocked on a pull the shards no longer answer does only after its reply timeout). A worker
    in ``mending`` runs a new process, on its way back: left alone."""
    for wid, info in coord.workers.items():
        handle = sup.handles.get(wid)
        if info.status != "failed" or info.error_kind in NOT_RESTARTED or handle is None:
            continue
        if wid in mending:
            continue
        if wid in sup.exit_codes or handle.poll() is not None:
            continue
        log.info("ending worker %d's process, which the run lost: %s", wid, info.error)
        handle.kill()
        handle.wait(END_LOST_WAIT_S)


# Failures a restart does not mend (the run stops on the first two anyway; ``late``: training
# ended before a restarted process could re-enter).
NOT_RESTARTED = frozenset({"input", "diverged", "late"})


def _restart_due(
    coord: Coordinator,
    sup: Supervisor,
    restarts: RestartBook,
    specs: Mapping[int, WorkerSpec],
    manifest: dict[str, Any],
) -> list[Event]:
    """Start again every worker whose back-off is over (while the run still trains)."""
    out: list[Event] = []
    for wid in restarts.due(time.monotonic()):
        if coord.phase != "training" or coord.workers[wid].status != "failed":
            continue
        sup.exit_codes.pop(wid, None)
        handle = sup.start(specs[wid])
        row = manifest["workers"][wid]
        row.update(pid=handle.pid, restarts=restarts.attempt(wid))
        data = {"attempt": restarts.attempt(wid), "pid": handle.pid, "spawned_at": time.time()}
        out.append(Event(wid, "restarted", data))
    return out


class _RejoinStates:
    """The run's last checkpoint, spread over the workers by the family, for a rejoining
    worker's fallback (and every stage's part when the pipeline rewinds); None when the run has
    none yet (or it cannot be read). Read from disk once per checkpoint: a rewind asks for
    every worker's part of the same one."""

    def __init__(self, setup: RunSetup) -> None:
        self.setup = setup
        self._read: tuple[Path, int, dict[int, HandIn]] | None = None

    def __call__(self, worker_id: int) -> tuple[int, HandIn] | None:
        from edgetrain.checkpoints import latest_checkpoint, load_checkpoint

        setup = self.setup
        folder = latest_checkpoint(setup.run_dir.path)
        if folder is None:
            return None
        if self._read is None or self._read[0] != folder:
            try:
                epoch, handins = load_checkpoint(setup.run_dir.path)
                spread = setup.family.resume(setup.recipe, handins, setup.roles)
            except EdgetrainError as exc:
                log.warning("no checkpoint for rejoining worker %d: %s", worker_id, exc)
                return None
            self._read = (folder, epoch, spread)
        _, epoch, spread = self._read
        handin = spread.get(worker_id)
        return (epoch, handin) if handin is not None else None


def _technique_named(recipe: Recipe) -> str:
    """``gossip/dlion``, with what keeps its workers from rejoining in brackets."""
    what = f"{recipe.train.family}/{recipe.train.technique}"
    blocker = rejoin_blocker(recipe)
    return f"{what} ({blocker})" if blocker else what


# The events that change who is in the run, kept in the manifest's ``membership``.
MEMBERSHIP = {
    "failed": "left",
    "restarted": "restarted",
    "rejoining": "rejoining",
    "joined": "joined",
    "rejoin_refused": "refused",
}


def _note_membership(manifest: dict[str, Any], event: Event, t: float) -> bool:
    """Add a leave or join to the manifest's ``membership`` (a rewind to a checkpoint to its
    ``rewinds``); True if it was one."""
    if event.kind == "rewound":
        manifest.setdefault("rewinds", []).append({"t": round(t, 3), "at": now_iso(), **event.data})
        return True
    what = MEMBERSHIP.get(event.kind)
    if what is None or event.worker is None:
        return False
    row: dict[str, Any] = {"worker": event.worker, "event": what, "t": round(t, 3)}
    row["at"] = now_iso()
    for key in ("reason", "epoch", "attempt", "host", "by", "new"):
        if key in event.data:
            row[key] = event.data[key]
    manifest.setdefault("membership", []).append(row)
    return True


class RunDiverged(RunError):
    """A worker's loss stopped being finite: the run stops (status ``diverged``)."""


class WorkerInputError(EdgetrainError):
    """A worker refused its input (a bind address its host lacks, data missing there)."""


def _apply_policy(
    coord: Coordinator,
    recipe: Recipe,
    run_dir: RunDir,
    started: float,
    opts: LaunchOptions,
    mending: frozenset[int] = frozenset(),
) -> None:
    """Raise :class:`RunError` when the run cannot go on: a diverged loss, a lost worker of a
    role the run cannot lose, too many failed trainers, a controller's halt, or workers that
    never registered. Workers in ``mending`` (a restart planned, or restarted and on their way
    back) and those turned away at the end of training (kind ``late``) do not count as failed
    trainers, nor as lost workers of a role the run cannot lose (only a technique that
    rebuilds such a worker restarts one: a parameter-server shard)."""

    def details(ids: Sequence[int]) -> str:
        return "; ".join(
            f"{coord.workers[i].label}: {coord.workers[i].error} "
            f"(log: {run_dir.log_file(worker_stem(i))})"
            for i in ids
        )

    if coord.diverged:
        first = coord.workers[coord.diverged[0]]
        raise RunDiverged(str(first.error))
    refused = [i for i in coord.failed if coord.workers[i].error_kind == "input"]
    if refused:
        raise WorkerInputError(details(refused))
    if fatal := [i for i in coord.fatal_failures if i not in mending]:
        ids = fatal
        raise RunError(
            f"lost {details(ids)}; the run cannot go on without {'it' if len(ids) == 1 else 'them'}"
        )
    failed = [i for i in coord.failed if coord.workers[i].error_kind != VACANT]  # slots: no loss
    limit = recipe.run.max_failed_fraction
    counted = [i for i in failed if i not in mending and coord.workers[i].error_kind != "late"]
    fraction = coord.failed_fraction * len(counted) / len(failed) if failed else 0.0
    if (counted and fraction > limit) or (failed and not coord.alive):
        named = counted if coord.alive else failed
        raise RunError(
            f"{len(named)} of {coord.num_workers} workers failed "
            f"({fraction:.0%} > max_failed_fraction {limit:g}): {details(named)}"
        )
    if coord.halted is not None:
        raise RunError(coord.halted)
    if coord.phase == "registering" and time.monotonic() - started > opts.register_timeout_s:
        missing = ", ".join(str(i) for i in coord.waiting_on())
        raise RunError(
            f"workers {missing} did not register within {opts.register_timeout_s:.0f} s "
            f"(logs: {run_dir.logs})"
        )


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM inside the block (main thread only): a second Ctrl-C, or the
    second SIGTERM of ``systemd``, ``docker stop`` or ``timeout``, must not cut clean-up short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _worker_status(info_status: str, run_status: str, kind: str | None = None) -> str:
    if info_status == "final":
        return "completed"
    if kind == VACANT:  # an open slot nobody joined
        return VACANT
    if info_status == "failed":
        return "failed"
    return "interrupted" if run_status == "interrupted" else "incomplete"


def run(setup: RunSetup, observer: Observer | None = None) -> RunOutcome:
    """Run the recipe's workers to completion and write the run directory and its report.

    With ``setup.resume``, the run goes on in its directory from that checkpoint: the manifest
    keeps the earlier attempts, metrics files are appended to. A user error found only now (an
    address the coordinator cannot bind) is re-raised after the manifest records it."""
    from edgetrain.report.write import write_report

    recipe, run_dir, opts = setup.recipe, setup.run_dir, setup.opts
    run_id = uuid.uuid4().hex[:16]
    manifest = _start_manifest(setup, run_id)
    if setup.resume is None:
        atomic_write_text(run_dir.recipe, setup.recipe_text)
    run_dir.write_manifest(manifest)
    rec = _Recorder(run_dir, recipe.num_workers, observer, run_id)
    sup = Supervisor(setup.launcher)
    watchdog = Watchdog(opts.watchdog_after_s, opts.watchdog_every_s, opts.startup_warn_after_s)
    status, error = "running", None
    user_error: EdgetrainError | None = None
    coord: Coordinator | None = None
    secret = new_secret()  # binds every control message to this run (protocol.auth_token)
    try:
        from edgetrain.runtime.limits import run_limits

        data_bytes = int(setup.data.x_train.nbytes + setup.data.y_train.nbytes)
        limits = run_limits(recipe, setup.data, setup.family.wire_load(recipe, data_bytes))
        rejoins = technique_rejoins(recipe)
        vacant = vacant_workers([r.name for r in setup.roles], recipe.run.join_slots)
        coord = Coordinator(
            run_id,
            recipe.to_dict(),
            setup.roles,
            setup.family.policy(recipe),
            setup.family.controller(recipe, setup.roles, run_dir.path),
            opts.bind_host,
            opts.announce_host,
            heartbeat_s=recipe.run.heartbeat_s,
            resume=setup.resume,
            security=opts.keys,
            epochs=recipe.train.epochs,
            placement=_placement_of(setup),
            secret=secret,
            limits=limits,
            rejoin=rejoins,
            vacant=vacant,
        )
        coord.on_silent = lambda wid: _dump_stacks(sup, wid)
        # a technique that takes workers back restarts them ([run] restart) or lets them join
        # (edgetrain join); the book counts both
        restarts = RestartBook(recipe.run.restart) if rejoins else None
        restartable = restarted_roles(recipe, coord.policy.fatal_roles)
        if restarts is not None:
            coord.rejoin_state = _RejoinStates(setup)
        if recipe.run.restart > 0 or vacant:
            manifest["membership"] = []
        for i in sorted(vacant):  # an open slot: started by edgetrain join, not now
            manifest["workers"][i]["status"] = VACANT
            rec.record(Event(i, "vacant", {"role": setup.roles[i].name}))
        log.info(
            "run %s: %s/%s, %d workers, coordinator at %s",
            run_id,
            recipe.train.family,
            recipe.train.technique,
            recipe.num_workers,
            coord.endpoint,
        )
        started = time.monotonic()
        if setup.resume is not None:
            rec.record(Event(None, "resumed", {"epoch": setup.resume.epoch}))
        _before_workers(setup, coord.endpoint, manifest)
        placements: list[Placement] | None = getattr(setup.launcher, "placements", None)
        specs = {
            spec.worker_id: spec
            for spec in _worker_specs(setup, coord.endpoint, run_id, placements, secret, limits)
        }
        where = [p.host for p in placements] if placements else [s.host for s in specs.values()]
        hosts = sorted(set(where))  # where edgetrain join may start a worker

        def spec_for(worker: int, host: str | None) -> WorkerSpec:
            """Worker ``worker``'s command, where it ran or in the first slot on ``host``."""
            if host is None or host == specs[worker].host or not placements:
                return specs[worker]
            slot = next(k for k, p in enumerate(placements) if p.host == host)
            specs[worker] = _worker_spec(setup, worker, coord.endpoint, run_id, placements,
                                         secret, limits, slot)  # fmt: skip
            return specs[worker]  # its later restarts start it there too

        for spec in specs.values():
            if spec.worker_id in vacant:
                continue
            handle = sup.start(spec)
            manifest["workers"][spec.worker_id]["pid"] = handle.pid
        manifest.update(status="running", coordinator=coord.endpoint)
        run_dir.write_manifest(manifest)
        doing = ActivityFile(run_dir.metrics)
        while not coord.finished:
            events = coord.poll(opts.poll_ms)
            events.extend(_check_workers(coord, sup, restarts, restartable))
            if restarts is not None:
                events.extend(_restart_due(coord, sup, restarts, specs, manifest))
            events.extend(
                serve_joins(
                    run_dir.path,
                    coord,
                    sup,
                    restarts or RestartBook(0),
                    spec_for,
                    hosts,
                    manifest,
                    rejoins=rejoins,
                    what=_technique_named(recipe),
                )
            )
            doing.update(coord.workers)
            members = False
            for ev in events:
                rec.record(ev)
                _write_artifacts(setup, ev)
                if restarts is not None:
                    members |= _note_membership(manifest, ev, ev.at - rec.t0)
                    if ev.kind == "joined" and ev.worker is not None:
                        restarts.back(ev.worker)
            if members:  # `edgetrain status` shows who left and who joined as it happens
                run_dir.write_manifest(manifest)
            _write_checkpoints(coord, setup, rec)
            if (ev_wait := watchdog.check(coord, time.monotonic())) is not None:
                rec.record(ev_wait)
            mending = frozenset(restarts.mending) if restarts is not None else frozenset()
            _apply_policy(coord, recipe, run_dir, started, opts, mending)
        rec.record(_final_model(setup, coord.finals))
        coord.stop_all()
        if not sup.wait_all(opts.stop_timeout_s):
            log.warning("some workers did not exit within %.0f s of stop", opts.stop_timeout_s)
        status = "completed"
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted by the user (Ctrl-C or SIGTERM)"
    except RunDiverged as exc:
        status, error = "diverged", str(exc)
    except RunError as exc:
        status, error = "failed", str(exc)
    except EdgetrainError as exc:  # a user error found only now: recorded, then exit 2
        status, error, user_error = "failed", str(exc), exc
    except Exception as exc:
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        with _signals_ignored():
            _finish(setup, coord, sup, rec, manifest, status, error)
    if user_error is not None and _nothing_ran(setup, sup, user_error):
        shutil.rmtree(run_dir.path, ignore_errors=True)  # a failed preflight leaves no trace
        raise user_error
    summary = write_report(run_dir)
    if user_error is not None:
        raise user_error
    return RunOutcome(status, error, summary)


def _nothing_ran(setup: RunSetup, sup: Supervisor, error: EdgetrainError) -> bool:
    """True if the hosts' preflight refused the run before any worker started, in a run
    directory made for this launch: there is nothing to keep."""
    from edgetrain.launch.ssh_preflight import PreflightError

    return isinstance(error, PreflightError) and setup.fresh and not sup.handles


def _finish(
    setup: RunSetup,
    coord: Coordinator | None,
    sup: Supervisor,
    rec: _Recorder,
    manifest: dict[str, Any],
    status: str,
    error: str | None,
) -> None:
    """Stop every worker, close everything, and write the manifest's last word."""
    if coord is not None:
        coord.stop_all()
    sup.terminate_all()
    _after_workers(setup.launcher)
    if coord is not None:
        coord.close()
    rec.record(Event(None, "end", {"status": status, "error": error}))
    rec.close()
    for w in manifest["workers"]:
        info = coord.workers[w["id"]] if coord is not None else None
        w["status"] = _worker_status(
            info.status if info else "pending", status, info.error_kind if info else None
        )
        w["exit_code"] = sup.exit_codes.get(w["id"])
        w["error"] = info.error if info else None
    manifest.update(
        status=status,
        error=error,
        end_time=now_iso(),
        wall_s=round(rec.elapsed(), 3),
        coordinator_traffic=coord.traffic.as_dict() if coord is not None else None,
        control_resent=coord.control.resent if coord is not None else 0,
        failed_workers=coord.failed if coord is not None else [],
    )
    setup.run_dir.write_manifest(manifest)


def _start_manifest(setup: RunSetup, run_id: str) -> dict[str, Any]:
    """A new manifest, or for a resumed run the old one with its last attempt kept."""
    fresh = initial_manifest(setup.recipe, run_id, setup.roles)
    if setup.inputs is not None:
        fresh["inputs"] = setup.inputs.to_dict()
    if setup.resume is None:
        return fresh
    old = setup.run_dir.read_manifest()
    attempts = list(old.get("attempts", []))
    attempt = {k: old.get(k) for k in ("run_id", "status", "error", "start_time", "end_time")}
    if setup.kept is not None:
        attempt["kept_in"] = str(setup.kept.relative_to(setup.run_dir.path))
    attempts.append(attempt)
    out = {**fresh, "attempts": attempts, "resumed_from_epoch": setup.resume.epoch}
    if setup.extended_epochs is not None:
        out["extended_epochs"] = setup.extended_epochs
    return out


def _write_artifacts(setup: RunSetup, event: Event) -> None:
    """Write the files the family asks for on this event, inside the run directory only."""
    root = setup.run_dir.path.resolve()
    for rel, content in setup.family.artifacts(event).items():
        path = (root / rel).resolve()
        if root not in path.parents:
            raise RunError(
                f"the {setup.recipe.train.family} family asked to write {rel!r} outside the run "
                "directory"
            )
        atomic_write_json(path, content)


def _write_checkpoints(coord: Coordinator, setup: RunSetup, rec: _Recorder) -> None:
    """Write every checkpoint the coordinator has completed, and drop it from memory."""
    from edgetrain.checkpoints import write_checkpoint

    roles = dict(enumerate(setup.roles))
    about = {"family": setup.recipe.train.family, "technique": setup.recipe.train.technique}
    for epoch in sorted(coord.checkpoints):
        handins = coord.checkpoints.pop(epoch)
        folder = write_checkpoint(setup.run_dir.path, epoch, handins, roles, about)
        rec.record(Event(None, "checkpoint_written", {"epoch": epoch, "path": str(folder)}))
