"""The exchange family's cost model calibrated on a measured run (the paper's "measured" terms,
as Mercury's :class:`~edgetrain.ps.mercury.predict.Calibration` does for Eq. 5). Pure.

A priori the model times a worker's gradient from the profile (linear in the batch, measured
on one host) and its loop's work from per-byte and per-message constants. A pilot run on the
very hosts measures both:

- each worker's **capacity curve** (the timed gradient steps the run plans its batches from,
  b0 / 8 to 4 b0): the shape of a step's time in the batch, its fixed part included, which a
  profile at one batch cannot give;
- at the run's uniform batch (its mean over the run, where SpeedUpBS lengthened it), each
  worker's **gradient CPU** per step (the shape's level: a step inside the loop, among the
  exchange's work, costs more than in the pilot's tight loop)
  and its **loop CPU** per iteration besides the gradient (every thread: encoding, the
  transport, taking messages in, the update).

CPU time, not wall: a CPU quota's stalls are the model's to time (:func:`..cost_model.wall_s`).
The calibrated model takes the gradient's work from the curve at the curve's level and adds,
to every iteration, the loop work the constants do not count (``extra_s``: what the
calibrating run measured beyond the model's own terms for it; never below zero). The extra
is per iteration, whatever the technique: a calibration on DLion carries to Gaia and Ako as
the loop's fixed cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from edgetrain.gossip.exchange.batching import Curve, step_time


@dataclass(frozen=True)
class Calibration:
    """What a run at uniform batch ``batch`` (its mean over the run) measured per worker: its
    capacity curve, its gradient's CPU seconds per step and its loop's CPU seconds per
    iteration besides the gradient; ``extra_s``: the loop work per iteration the model does
    not count (filled by :func:`with_extra`; empty: none yet)."""

    batch: float
    curves: Mapping[int, Curve]
    gradient_cpu_s: Mapping[int, float]
    loop_cpu_s: Mapping[int, float]
    extra_s: Mapping[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.batch) and self.batch >= 1):
            raise ValueError("a calibration's batch must be at least 1")
        workers = set(self.curves)
        if not workers or workers != set(self.gradient_cpu_s) or workers != set(self.loop_cpu_s):
            raise ValueError(
                "a calibration needs a curve, a gradient CPU and a loop CPU per worker"
            )
        for name in ("gradient_cpu_s", "loop_cpu_s", "extra_s"):
            for w, v in getattr(self, name).items():
                if not (math.isfinite(v) and v >= 0):
                    raise ValueError(f"a calibration's {name} of worker {w} must be >= 0")
        for w in workers:
            step_time(self.curves[w], self.batch)  # ValueError on an unusable curve

    def covers(self, workers: Sequence[int]) -> bool:
        """Whether it measured every one of ``workers``."""
        return set(workers) <= set(self.curves)

    def gradient_s(self, worker: int, batch: float) -> float:
        """Reference seconds of ``worker``'s gradient at ``batch``: the curve's step time
        there, scaled so that at the calibrating batch it is the measured CPU."""
        curve = self.curves[worker]
        return step_time(curve, batch) * self.gradient_cpu_s[worker] / step_time(curve, self.batch)

    def extra(self, worker: int) -> float:
        return self.extra_s.get(worker, 0.0)


def with_extra(cal: Calibration, modelled_loop_s: Mapping[int, float]) -> Calibration:
    """``cal`` with each worker's extra: its measured loop CPU over what the model counts for
    the calibrating run (``modelled_loop_s``: reference seconds per iteration), at least 0."""
    extra = {w: max(0.0, cal.loop_cpu_s[w] - modelled_loop_s.get(w, 0.0)) for w in cal.curves}
    return replace(cal, extra_s=extra)
