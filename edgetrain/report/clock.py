"""The training clock: accuracy against training time, with evaluation kept out. Pure.

Workers evaluate at the end of an epoch, after its training steps, and report both durations
(``epoch_s``, ``eval_s``); the coordinator stamps when each report arrived (``t``). With epoch
barriers, epoch E's training ends when the last worker finished its steps, its arrival minus its
evaluation, and the clock runs from the previous barrier's release::

    T(E) = T(E-1) + max_i (t_i(E) - eval_i(E)) - release(E-1)      release(0) = start

so the time workers spend evaluating at a barrier (while the others wait) never counts.
Without barriers each worker's own clock excludes its own evaluations, and epoch E is over when
the slowest worker's is::

    T(E) = max_i (t_i(E) - start - sum_{e <= E} eval_i(e))

The accuracy of epoch E is the mean of the workers' test accuracies reported for E (DESIGN:
"time to target" is the first epoch at or above the target), and its ``loss`` and ``test_loss``
the means of the training and test losses the workers reported (a worker that computes none,
such as a pipeline stage before the last, is left out). A resumed run continues the clock of
the attempt it resumed from, at the checkpointed epoch.

Each worker's own points (:func:`worker_points`, the report's per-worker plots) sit on the same
clock: with barriers, the run's clock at the previous release plus the worker's training since
that release; without, the worker's own time with its evaluations left out. The run's point of
an epoch is the latest of its workers' (and never earlier than the epoch before).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

# a worker's epoch report field: its epoch-end snapshots scored after training, [[epoch,
# accuracy, loss], ...] (edgetrain.runtime.snapshots.DEFERRED; the report's modules stay free
# of torch)
DEFERRED = "deferred_eval"


@dataclass(frozen=True)
class Report:
    """One worker's end of one epoch, as the coordinator recorded it."""

    worker: int
    epoch: int
    t: float
    eval_s: float = 0.0
    accuracy: float | None = None
    loss: float | None = None  # the epoch's mean training loss
    test_loss: float | None = None


@dataclass(frozen=True)
class Point:
    """Epoch ``epoch`` ended ``train_s`` training seconds (``wall_s`` wall seconds) in."""

    epoch: int
    train_s: float
    wall_s: float
    accuracy: float | None
    workers: int
    loss: float | None = None
    test_loss: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "train_s": round(self.train_s, 4),
            "wall_s": round(self.wall_s, 4),
            "test_accuracy": self.accuracy,
            "workers": self.workers,
            "loss": self.loss,
            "test_loss": self.test_loss,
        }


@dataclass(frozen=True)
class WorkerPoint:
    """Worker ``worker`` ended epoch ``epoch`` ``train_s`` training seconds in."""

    worker: int
    epoch: int
    train_s: float
    accuracy: float | None = None
    loss: float | None = None
    test_loss: float | None = None


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _by_epoch(reports: Sequence[Report]) -> dict[int, list[Report]]:
    out: dict[int, list[Report]] = {}
    for r in reports:
        out.setdefault(r.epoch, []).append(r)
    return dict(sorted(out.items()))


def worker_points(
    start: float, reports: Sequence[Report], releases: Mapping[int, float] | None
) -> list[WorkerPoint]:
    """Each worker's end of each epoch of one attempt on the training clock (``releases``:
    barrier times by epoch; None: no barriers)."""
    out: list[WorkerPoint] = []
    clock, previous = 0.0, start
    spent: dict[int, float] = {}  # without barriers: each worker's evaluation so far
    for epoch, rows in _by_epoch(reports).items():
        for r in rows:
            if releases is not None:
                at = clock + max(0.0, r.t - r.eval_s - previous)
            else:
                spent[r.worker] = spent.get(r.worker, 0.0) + r.eval_s
                at = r.t - start - spent[r.worker]
            out.append(WorkerPoint(r.worker, epoch, at, r.accuracy, r.loss, r.test_loss))
        if releases is not None:
            clock = max(p.train_s for p in out[-len(rows) :])
            previous = releases.get(epoch, max(r.t for r in rows))
    return out


def attempt_curve(
    start: float, reports: Sequence[Report], releases: Mapping[int, float] | None
) -> list[Point]:
    """The curve of one attempt (``releases``: barrier times by epoch; None: no barriers)."""
    mine = worker_points(start, reports, releases)
    points: list[Point] = []
    clock = 0.0
    for epoch, rows in _by_epoch(reports).items():
        ended = [p for p in mine if p.epoch == epoch]
        clock = max(clock, max(p.train_s for p in ended))
        points.append(
            Point(
                epoch,
                clock,
                max(r.t for r in rows) - start,
                _mean([r.accuracy for r in rows]),
                len(rows),
                _mean([r.loss for r in rows]),
                _mean([r.test_loss for r in rows]),
            )
        )
    return points


def join_attempts(attempts: Sequence[tuple[int, list[Point]]]) -> list[Point]:
    """One curve from attempts, each ``(epoch it resumed after, its curve)``: a later attempt
    replaces the epochs after its checkpoint and continues the clock from there."""
    out: list[Point] = []
    for resumed_after, curve in attempts:
        kept = [p for p in out if p.epoch <= resumed_after]
        base_train = kept[-1].train_s if kept else 0.0
        base_wall = kept[-1].wall_s if kept else 0.0
        out = kept + [
            replace(p, train_s=p.train_s + base_train, wall_s=p.wall_s + base_wall) for p in curve
        ]
    return out


def join_worker_points(
    attempts: Sequence[tuple[int, list[WorkerPoint]]],
) -> list[WorkerPoint]:
    """The workers' points of every attempt, each ``(epoch it resumed after, its points)``, as
    :func:`join_attempts` joins the run's curve: a later attempt replaces the epochs after its
    checkpoint and continues the clock from the run's clock there."""
    out: list[WorkerPoint] = []
    for resumed_after, points in attempts:
        kept = [p for p in out if p.epoch <= resumed_after]
        base = max((p.train_s for p in kept), default=0.0)  # the run's clock there
        out = kept + [replace(p, train_s=p.train_s + base) for p in points]
    return out


def time_to(curve: Sequence[Point], target: float) -> Point | None:
    """The first epoch whose accuracy is at or above ``target``, or None."""
    for p in curve:
        if p.accuracy is not None and p.accuracy >= target:
            return p
    return None
