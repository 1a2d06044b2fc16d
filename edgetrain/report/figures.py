"""What the report's plots draw, as plain series. Pure.

Both plots put training time on the x-axis, evaluation excluded (:mod:`edgetrain.report.clock`),
so a run's curve starts where its training did, not after its start-up:

- accuracy: each worker's test accuracy after each epoch, the pipeline evaluator's snapshots
  (scored after the run, each at the training time it was taken: :func:`snapshot_times`), and
  the run's model (final or averaged) as a star at the end of training;
- loss: each worker's mean training loss per epoch (a pipeline stage before the last computes
  none), the test loss (of the snapshots where the run has them, else the workers' mean), and
  the model's test loss.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from edgetrain.report.clock import WorkerPoint

Kind = Literal["line", "dashed", "star"]


@dataclass(frozen=True)
class Series:
    """One thing a plot draws: a line (with markers), a dashed line, or a single star."""

    label: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    kind: Kind = "line"


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def worker_label(worker: Mapping[str, Any]) -> str:
    """``worker 0``, ``worker 3 (slow x2)``, ``worker 2 stage 2``."""
    role = worker.get("role", "trainer")
    index = worker.get("role_index")
    what = "" if role == "trainer" else f" {role}" + (f" {index}" if index is not None else "")
    slow = _number(worker.get("slowdown")) or 1.0
    return f"worker {worker['id']}{what}" + (f" (slow x{slow:g})" if slow != 1 else "")


def _series(label: str, pairs: Sequence[tuple[Any, Any]], kind: Kind = "line") -> Series | None:
    """A series of the pairs whose both values are numbers (None: there is none)."""
    xs: list[float] = []
    ys: list[float] = []
    for a, b in pairs:
        x, y = _number(a), _number(b)
        if x is not None and y is not None:
            xs.append(x)
            ys.append(y)
    return Series(label, tuple(xs), tuple(ys), kind) if xs else None


def _per_worker(
    summary: Mapping[str, Any], curves: Mapping[int, Sequence[WorkerPoint]], field: str
) -> list[Series]:
    out = []
    for w in summary.get("workers", []):
        pairs = [(p.train_s, getattr(p, field)) for p in curves.get(int(w["id"]), [])]
        if (s := _series(worker_label(w), pairs)) is not None:
            out.append(s)
    return out


def _snapshots(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    snaps = (summary.get("technique_report") or {}).get("snapshots")
    return [s for s in snaps if isinstance(s, dict)] if isinstance(snaps, list) else []


def snapshot_times(
    snaps: Sequence[Mapping[str, Any]], curve: Sequence[Mapping[str, Any]]
) -> list[float | None]:
    """Each snapshot's time on the run's training clock. A snapshot carries the stages' own
    clock, which leaves out what happens before a stage's first step; the run's clock starts
    at the run's start. So an epoch-end snapshot sits at its epoch's point of the run's curve,
    and one taken within an epoch in proportion between the epoch-end snapshots around it."""
    run_clock = {p.get("epoch"): _number(p.get("train_s")) for p in curve}
    anchors = [(0.0, 0.0)]
    for s in snaps:
        own, at = _number(s.get("train_s")), run_clock.get(s.get("epoch"))
        if s.get("epoch_end") and own is not None and at is not None and own > anchors[-1][0]:
            anchors.append((own, at))
    if len(anchors) == 1:  # no epoch-end snapshot to anchor on: the stages' clock
        return [_number(s.get("train_s")) for s in snaps]
    return [_on(anchors, _number(s.get("train_s"))) for s in snaps]


def _on(anchors: Sequence[tuple[float, float]], x: float | None) -> float | None:
    """``x`` mapped piecewise linearly through ``anchors`` (past the last: shifted with it)."""
    if x is None:
        return None
    for (x0, y0), (x1, y1) in zip(anchors, anchors[1:], strict=False):
        if x <= x1:
            return y0 + (x - x0) * (y1 - y0) / (x1 - x0)
    last_x, last_y = anchors[-1]
    return last_y + (x - last_x)


def _model_label(summary: Mapping[str, Any]) -> str:
    averaged = summary.get("averaged_test_accuracy") is not None
    return "averaged model" if averaged else "final model"


def accuracy_series(
    summary: Mapping[str, Any], curves: Mapping[int, Sequence[WorkerPoint]]
) -> list[Series]:
    """The accuracy plot of a run's summary and its workers' points."""
    out = _per_worker(summary, curves, "accuracy")
    snaps = _snapshots(summary)
    times = snapshot_times(snaps, summary.get("curve", []))
    pairs = [(t, s.get("test_accuracy")) for t, s in zip(times, snaps, strict=True)]
    if (snap := _series("snapshots (scored after the run)", pairs)) is not None:
        out.append(snap)
    end = summary.get("train_s")
    model = _series(_model_label(summary), [(end, summary.get("test_accuracy"))], "star")
    if model is not None:
        out.append(model)
    return out


def loss_series(
    summary: Mapping[str, Any], curves: Mapping[int, Sequence[WorkerPoint]]
) -> list[Series]:
    """The loss plot of a run's summary and its workers' points."""
    out = [
        Series(f"{s.label}: training loss", s.xs, s.ys)
        for s in _per_worker(summary, curves, "loss")
    ]
    curve = summary.get("curve", [])
    snaps = _snapshots(summary)
    times = snapshot_times(snaps, curve)
    pairs = [(t, s.get("test_loss")) for t, s in zip(times, snaps, strict=True)]
    test = _series("snapshots: test loss", pairs, "dashed")
    if test is None:  # no snapshots: the workers' own evaluations
        pairs = [(p.get("train_s"), p.get("test_loss")) for p in curve]
        test = _series("test loss (mean over workers)", pairs, "dashed")
    if test is not None:
        out.append(test)
    end = summary.get("train_s")
    label = f"{_model_label(summary)}: test loss"
    if (model := _series(label, [(end, summary.get("test_loss"))], "star")) is not None:
        out.append(model)
    return out
