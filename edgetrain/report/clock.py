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
"time to target" is the first epoch at or above the target). A resumed run continues the clock
of the attempt it resumed from, at the checkpointed epoch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Report:
    """One worker's end of one epoch, as the coordinator recorded it."""

    worker: int
    epoch: int
    t: float
    eval_s: float = 0.0
    accuracy: float | None = None


@dataclass(frozen=True)
class Point:
    """Epoch ``epoch`` ended ``train_s`` training seconds (``wall_s`` wall seconds) in."""

    epoch: int
    train_s: float
    wall_s: float
    accuracy: float | None
    workers: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "train_s": round(self.train_s, 4),
            "wall_s": round(self.wall_s, 4),
            "test_accuracy": self.accuracy,
            "workers": self.workers,
        }


def attempt_curve(
    start: float, reports: Sequence[Report], releases: Mapping[int, float] | None
) -> list[Point]:
    """The curve of one attempt (``releases``: barrier times by epoch; None: no barriers)."""
    by_epoch: dict[int, list[Report]] = {}
    for r in reports:
        by_epoch.setdefault(r.epoch, []).append(r)
    points: list[Point] = []
    clock, previous = 0.0, start
    spent: dict[int, float] = {}  # without barriers: each worker's evaluation so far
    for epoch in sorted(by_epoch):
        rows = by_epoch[epoch]
        if releases is not None:
            ended = max(r.t - r.eval_s for r in rows)
            clock += max(0.0, ended - previous)
            previous = releases.get(epoch, max(r.t for r in rows))
        else:
            for r in rows:
                spent[r.worker] = spent.get(r.worker, 0.0) + r.eval_s
            clock = max(clock, max(r.t - start - spent[r.worker] for r in rows))
        accs = [r.accuracy for r in rows if r.accuracy is not None]
        acc = sum(accs) / len(accs) if accs else None
        points.append(Point(epoch, clock, max(r.t for r in rows) - start, acc, len(rows)))
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
            Point(p.epoch, p.train_s + base_train, p.wall_s + base_wall, p.accuracy, p.workers)
            for p in curve
        ]
    return out


def time_to(curve: Sequence[Point], target: float) -> Point | None:
    """The first epoch whose accuracy is at or above ``target``, or None."""
    for p in curve:
        if p.accuracy is not None and p.accuracy >= target:
            return p
    return None
