"""The pipeline family's cost model calibrated on a run: what the stages of a measured run (a
reproduction's pilot) spent per microbatch, set against what the model predicted for the same
stages, as three terms the model (:class:`~edgetrain.pipeline.predict.Shape`) carries. Pure.

- ``compute_scale``: the stages' compute CPU (forward, backward, update; replay left out) over
  the model's compute for them. On an emulated host this holds what the profile, taken alone on
  one host, cannot see: hosts sharing physical cores, a technique's own update (PipeDream's new
  weight version), the unit kernels' overheads.
- ``replay_scale``: mcPipe's replay CPU over the model's replay (1 where nothing replayed).
- ``outside_s``: each stage's CPU per microbatch outside its compute blocks (ZeroMQ's I/O
  threads, heartbeats, snapshots), at speed 1: the mean over the stages.

A stage's CPU seconds become its seconds per microbatch at its host's share of a core: on a
host that gives the stage ``cores`` cores, ``c`` CPU seconds take ``c / cores`` seconds when the
stage is CPU-bound, which is what the model's stage time (profiled seconds over the device's
speed) stands for. Only ratios of measured to predicted enter, so the profile's own unit
cancels; the outside term is carried at speed 1 (times the pilot's device speed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgetrain.pipeline.predict import Shape, StageCost


@dataclass(frozen=True)
class StageMeasure:
    """One stage of a measured run: the microbatches it computed and its CPU seconds over
    them (compute blocks with replay, replay alone, the whole process), and the cores its host
    gives it (a CPU quota's share; 1 without one)."""

    microbatches: int
    compute_cpu_s: float
    replay_cpu_s: float
    process_cpu_s: float
    cores: float

    def __post_init__(self) -> None:
        for name in ("compute_cpu_s", "replay_cpu_s", "process_cpu_s", "cores"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, not {v!r}")
        if self.microbatches <= 0 or self.cores <= 0:
            raise ValueError("a measured stage needs microbatches > 0 and cores > 0")
        if self.replay_cpu_s > self.compute_cpu_s:
            raise ValueError("a stage's replay CPU cannot exceed its compute CPU")

    def wall(self, cpu_s: float) -> float:
        """``cpu_s`` of this stage's CPU as seconds per microbatch at its share."""
        return cpu_s / self.microbatches / self.cores

    @property
    def compute_s(self) -> float:
        """Compute without replay, seconds per microbatch."""
        return self.wall(self.compute_cpu_s - self.replay_cpu_s)

    @property
    def replay_s(self) -> float:
        return self.wall(self.replay_cpu_s)

    @property
    def outside_s(self) -> float:
        """CPU outside the compute blocks, seconds per microbatch (0 if the timers overlap)."""
        return self.wall(max(0.0, self.process_cpu_s - self.compute_cpu_s))


@dataclass(frozen=True)
class Calibration:
    """The model's terms from a run (:func:`calibrate`)."""

    compute_scale: float = 1.0
    replay_scale: float = 1.0
    outside_s: float = 0.0

    def apply(self, shape: Shape) -> Shape:
        """``shape`` with these terms."""
        return replace(
            shape,
            compute_scale=self.compute_scale,
            replay_scale=self.replay_scale,
            outside_s=self.outside_s,
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "compute_scale": self.compute_scale,
            "replay_scale": self.replay_scale,
            "outside_ms": self.outside_s * 1e3,
        }


def calibrate(
    predicted: Sequence[StageCost],
    measured: Sequence[StageMeasure],
    speeds: Sequence[float],
) -> Calibration:
    """The terms that make the a priori model (``predicted``: its uncalibrated stage costs of
    the measured run's shape) account for ``measured``, stage for stage; ``speeds`` are the
    stages' device speeds in the model. The scales are ratios of sums over the stages (a
    stage's share of the work weighs its error); the outside term is the stages' mean."""
    if not (len(predicted) == len(measured) == len(speeds)) or not measured:
        raise ValueError(
            f"{len(predicted)} predicted stages, {len(measured)} measured, {len(speeds)} speeds"
        )
    pred_compute = sum(st.compute_s - st.replay_s - st.outside_s for st in predicted)
    pred_replay = sum(st.replay_s for st in predicted)
    if pred_compute <= 0:
        raise ValueError("the model predicted no compute for the measured stages")
    compute = sum(m.compute_s for m in measured) / pred_compute
    got_replay = sum(m.replay_s for m in measured)
    replay = got_replay / pred_replay if pred_replay > 0 and got_replay > 0 else 1.0
    outside = sum(m.outside_s * v for m, v in zip(measured, speeds, strict=True)) / len(measured)
    return Calibration(compute, replay, outside)
