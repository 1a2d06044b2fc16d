"""What each worker's row of the live view says, from the run's events. Pure.

A :class:`Row` follows one worker through its phases: start-up (``launching`` the process,
``loading`` its data and model, ``ready`` and waiting for the others), then the work of its role
(``training`` for roles with epochs, ``serving`` for a parameter server, ``collecting`` snapshots
for a pipeline evaluator), ``draining`` (or ``scoring`` the snapshots) and ``done`` or
``failed``. :func:`apply` folds one event into a row; :func:`cells` says what the row shows at a
moment ``now`` (seconds since the run's start, the clock of the events' ``t``).

What a row shows depends on its role:

- roles with epochs: the epoch, the loss where the role computes one (a pipeline stage that is
  not the last passes activations on and has none), the test accuracy where the role evaluates
  (trainers), samples per second and the time left while training;
- ``server``: the pushes it served and the pulls it answered;
- ``evaluator``: the snapshots received, then those scored and the last one's accuracy.

Samples per second are steps per second since the worker's first progress report (waits and
evaluations included, as the time left must count them) times the samples of a step: the batch
the worker reports when its technique changes it (DLion's ``batch``), else the recipe's
``batch_size``. Steps per epoch come from the worker's ``ready`` report, else are estimated
from its training samples until its first epoch ends, then taken from ``epoch_steps``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

EPOCH_ROLES = ("trainer", "stage", "replica")
STARTUP = ("launching", "loading", "ready")
STARTUP_TEXT = {
    "launching": "starting: launching the process",
    "loading": "starting: loading data and model",
    "ready": "starting: loaded, waiting for the others",
}
PHASE_TEXT = {
    "training": "training",
    "serving": "serving",
    "collecting": "collecting snapshots",
    "running": "running",
    "draining": "handing in",
    "scoring": "scoring snapshots",
    "done": "done",
    "vacant": "open slot: edgetrain join RUN --worker ID fills it",
}
SLOWDOWN_LEGEND = (
    "slow xN: an emulated slower device, the worker sleeps N-1 times its compute time after "
    "each step ([[workers]] slowdown)"
)


@dataclass
class Row:
    """One worker's row: who it is, then what its events said."""

    worker: int
    role: str = "trainer"
    index: int = 0
    host: str = "localhost"
    slowdown: float = 1.0
    epochs: int = 1
    batch_size: int = 1
    computes_loss: bool = True  # False: a pipeline stage before the last
    phase: str = "launching"
    since: float = 0.0  # when the phase began
    epoch: int = 0  # the epoch in progress (or the last one ended)
    steps_per_epoch: int | None = None
    learned_steps: bool = False  # steps per epoch measured (not estimated)
    samples: int | None = None  # the worker's training samples (its ``ready`` report)
    completed: int = 0  # steps since the run's first epoch; never moves back
    loss: float | None = None
    accuracy: float | None = None
    batch: float | None = None  # samples per step the worker reported
    origin: tuple[float, int] | None = None  # (t, step) of its first progress report
    latest: tuple[float, int] | None = None  # (t, step) of its latest one
    counters: dict[str, int] = field(default_factory=dict)
    snapshot_accuracy: float | None = None
    error: str | None = None

    @property
    def has_epochs(self) -> bool:
        return self.role in EPOCH_ROLES

    @property
    def evaluates(self) -> bool:
        """Does this role report a test accuracy of its own during the run?"""
        return self.role == "trainer"


@dataclass(frozen=True)
class Cells:
    """What a row shows: its label, the bar (``total`` None: a pulsing bar), what it does
    (``detail``) and its phase (``status``)."""

    label: str
    slow: str
    total: int | None
    completed: int
    detail: str
    status: str


def new_rows(
    roles: Sequence[tuple[str, int]],
    hosts: Sequence[str],
    slowdowns: Sequence[float],
    epochs: int,
    batch_size: int,
) -> dict[int, Row]:
    """The rows of a run's workers, before any event (``roles``: each worker's name and
    index)."""
    stages = sum(1 for name, _ in roles if name == "stage")
    return {
        i: Row(
            i,
            name,
            index,
            host,
            slow,
            epochs,
            batch_size,
            computes_loss=name != "stage" or index == stages - 1,
        )
        for i, ((name, index), host, slow) in enumerate(zip(roles, hosts, slowdowns, strict=True))
    }


def running_phase(role: str) -> str:
    if role in EPOCH_ROLES:
        return "training"
    return {"server": "serving", "evaluator": "collecting"}.get(role, "running")


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _enter(row: Row, phase: str, t: float) -> None:
    if row.phase != phase and row.phase not in ("done", "failed"):
        row.phase, row.since = phase, t


def _position(row: Row, epoch: int, epoch_step: int) -> None:
    spe = row.steps_per_epoch or 0
    row.completed = max(row.completed, max(0, epoch - 1) * spe + epoch_step)


def _observe(row: Row, t: float, step: int | None) -> None:
    if step is None:
        return
    if row.origin is None:
        row.origin = (t, step)
    row.latest = (t, step)


def apply(row: Row, kind: str, data: Mapping[str, Any], t: float) -> None:
    """Fold one of this worker's events into its row."""
    if kind == "registered":
        if data.get("host"):
            row.host = str(data["host"])
        _enter(row, "loading", t)
    elif kind == "ready":
        row.samples = _int(data.get("samples"))
        spe = _int(data.get("steps_per_epoch"))
        if spe:
            row.steps_per_epoch, row.learned_steps = spe, True
        elif row.samples:
            row.steps_per_epoch = -(-row.samples // max(1, row.batch_size))
        _enter(row, "ready", t)
    elif kind == "progress":
        _on_progress(row, data, t)
    elif kind == "epoch":
        _on_epoch(row, data, t)
    elif kind == "done":
        _enter(row, "draining", t)
    elif kind == "final":
        _on_final(row, data)
        _enter(row, "done", t)
    elif kind == "vacant":  # [run] join_slots: nobody runs it until a new worker joins
        row.phase, row.since = "vacant", t
    elif kind in ("restarted", "rejoining", "joined"):  # [run] restart: it comes back
        row.error = None
        phase = {"restarted": "launching", "rejoining": "loading"}.get(kind)
        row.phase, row.since = phase or running_phase(row.role), t
    elif kind in ("error", "failed"):
        reason = data.get("message") or data.get("reason")
        row.error = " ".join(str(reason).split())[:60] if reason else "unknown"
        if row.phase != "done":
            row.phase, row.since = "failed", t


def apply_run(rows: Mapping[int, Row], kind: str, data: Mapping[str, Any], t: float) -> None:
    """Fold a run-level event (the coordinator's own) into every row it concerns."""
    if kind == "started":
        for row in rows.values():
            if row.phase != "vacant":
                _enter(row, running_phase(row.role), t)
    elif kind == "draining":
        for row in rows.values():
            if not row.has_epochs and row.phase in ("serving", "collecting", "running"):
                _enter(row, "scoring" if row.role == "evaluator" else "draining", t)


def _on_progress(row: Row, data: Mapping[str, Any], t: float) -> None:
    if row.phase in STARTUP:  # a report can outrun the run's ``started`` event
        _enter(row, running_phase(row.role), t)
    if row.has_epochs:
        epoch = _int(data.get("epoch")) or 0
        row.epoch = max(row.epoch, epoch)
        _position(row, epoch, _int(data.get("epoch_step")) or 0)
        loss = _number(data.get("loss"))
        if loss is not None and row.computes_loss:
            row.loss = loss
        _observe(row, t, _int(data.get("step")))
        return
    for key in ("pushes", "pulls", "snapshots_received", "snapshots_scored"):
        if (n := _int(data.get(key))) is not None:
            row.counters[key] = n
    if (acc := _number(data.get("snapshot_accuracy"))) is not None:
        row.snapshot_accuracy = acc


def _on_epoch(row: Row, data: Mapping[str, Any], t: float) -> None:
    epoch = _int(data.get("epoch")) or 0
    steps = _int(data.get("epoch_steps"))
    if steps:
        row.steps_per_epoch, row.learned_steps = steps, True
    if (batch := _number(data.get("batch"))) is not None and batch > 0:
        row.batch = batch
    row.epoch = max(row.epoch, epoch)
    row.completed = max(row.completed, epoch * (row.steps_per_epoch or 0))
    if (loss := _number(data.get("loss"))) is not None and row.computes_loss:
        row.loss = loss
    if (acc := _number(data.get("test_accuracy"))) is not None:
        row.accuracy = acc
    _observe(row, t, _int(data.get("steps")))


def _on_final(row: Row, data: Mapping[str, Any]) -> None:
    if (acc := _number(data.get("final_test_accuracy"))) is not None:
        row.accuracy = acc
    for key in ("pushes", "pulls"):
        if (n := _int(data.get(key))) is not None:
            row.counters[key] = n
    snaps = data.get("snapshots")
    if isinstance(snaps, list):
        scored = [s for s in snaps if isinstance(s, dict) and _number(s.get("test_accuracy"))]
        row.counters["snapshots_received"] = len(snaps)
        row.counters["snapshots_scored"] = len(scored)
        if scored:
            row.snapshot_accuracy = _number(scored[-1].get("test_accuracy"))


def steps_per_second(row: Row) -> float | None:
    """Steps per second since the worker's first progress report (None: too soon to say)."""
    if row.origin is None or row.latest is None:
        return None
    dt, steps = row.latest[0] - row.origin[0], row.latest[1] - row.origin[1]
    return steps / dt if dt > 0 and steps > 0 else None


def total_steps(row: Row) -> int | None:
    return row.steps_per_epoch * row.epochs if row.steps_per_epoch else None


def seconds_left(row: Row, now: float) -> float | None:
    """The training time left at ``now``, at the worker's rate so far (None: unknown)."""
    rate, total = steps_per_second(row), total_steps(row)
    if rate is None or total is None or row.latest is None or row.phase != "training":
        return None
    return max(0.0, (total - row.completed) / rate - max(0.0, now - row.latest[0]))


def clock(seconds: float) -> str:
    """``0:05``, ``12:40``, ``1:02:03``."""
    s = int(round(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def _fmt(x: float | None) -> str:
    return f"{x:.3f}" if x is not None else "-"


def label(row: Row) -> str:
    """``worker 0``, or with its role where it is not a trainer: ``worker 3 stage 2``."""
    what = "" if row.role == "trainer" else f" {row.role} {row.index}"
    return f"worker {row.worker}{what} {row.host}"


def detail(row: Row, now: float) -> str:
    """What the worker does, in its role's words."""
    if row.phase in STARTUP:
        return ""
    if row.has_epochs:
        parts = [f"epoch {row.epoch}/{row.epochs}"]
        if row.computes_loss:
            parts.append(f"loss {_fmt(row.loss)}")
        if row.evaluates:
            parts.append(f"acc {_fmt(row.accuracy)}")
        if row.phase == "training":
            rate = steps_per_second(row)
            if rate is not None:
                parts.append(f"{rate * (row.batch or row.batch_size):,.0f} samples/s")
            left = seconds_left(row, now)
            if left is not None:
                parts.append(f"ETA {clock(left)}")
        return "  ".join(parts)
    c = row.counters
    if row.role == "server":
        return f"served {c.get('pushes', 0)} pushes, answered {c.get('pulls', 0)} pulls"
    if row.role == "evaluator":
        if "snapshots_scored" in c:
            text = f"scored {c['snapshots_scored']} snapshots"
            acc = row.snapshot_accuracy
            return text + (f", last acc {acc:.3f}" if acc is not None else "")
        return f"received {c.get('snapshots_received', 0)} snapshots"
    return ""


def status(row: Row, now: float) -> str:
    if row.phase == "failed":
        return f"failed: {row.error}"
    if row.phase in STARTUP:
        return f"{STARTUP_TEXT[row.phase]} {max(0.0, now - row.since):.0f} s"
    return PHASE_TEXT.get(row.phase, row.phase)


def bar(row: Row) -> tuple[int | None, int]:
    """The bar's total and position: steps for roles with epochs once they train, a pulse
    (None) while starting up or serving, full once done."""
    total = total_steps(row) if row.has_epochs else None
    if row.phase in ("done", "failed") and total is None:
        return 1, 1 if row.phase == "done" else 0
    if row.phase in STARTUP or total is None:
        return None, 0
    return total, row.completed


def cells(row: Row, now: float) -> Cells:
    total, completed = bar(row)
    slow = f"slow x{row.slowdown:g}" if row.slowdown != 1 else ""
    return Cells(label(row), slow, total, completed, detail(row, now), status(row, now))


def legend(rows: Mapping[int, Row]) -> str | None:
    """The line that explains ``slow xN``, where a worker is slowed down."""
    return SLOWDOWN_LEGEND if any(r.slowdown != 1 for r in rows.values()) else None
