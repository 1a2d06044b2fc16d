"""What a stage costs under each partition objective (specification §9.2). Pure.

- ``time``: the stage's compute, ``speed_s * sum(fwd + bwd) * kappa_s`` (kappa_s = 1 + w_s * phi
  for mcPipe's replays, phi = the weight-gradient share of a unit's compute), and the transfer
  of its output activation and error, ``2 * b * out_elems * 4 / bandwidth``; an asynchronous
  pipeline overlaps the two, so a stage costs the larger. Unit times come from a profile
  (seconds, scaled to the microbatch) or, without one, from multiply-accumulates.
- ``params``: the stage's parameter bytes (the theorem's equal split).
- ``memory``: the stage's resident bytes under its technique (:mod:`.bounds`), plus the
  transient, the saved activations of m_s microbatches and the optimiser state, over its host's
  memory cap when there is one.

A stage whose memory estimate exceeds its cap costs ``inf`` under every objective.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from edgetrain.pipeline import bounds, schedule
from edgetrain.pipeline.partition import Cost
from edgetrain.pipeline.store_mode import store_mode
from edgetrain.pipeline.table import UnitInfo

OBJECTIVES = ("time", "params", "memory")


@dataclass(frozen=True)
class Setting:
    """The run's facts a stage cost depends on."""

    technique: str = "pipedream"
    stages: int = 1
    microbatch: int = 16
    extra: int = 0
    uniform: int | None = None
    momentum: bool = False
    store: str = "mixed"  # mcPipe's option ("auto": mcPipe-auto)
    speeds: Sequence[float] = ()  # per stage, 1.0 = the profile's host
    caps: Sequence[int | None] = ()  # per stage, bytes
    bandwidth: float | None = None  # bytes/s between consecutive stages
    times: Sequence[float] | None = None  # per unit fwd + bwd seconds at the microbatch
    replay_share: float = 1.0 / 3.0  # phi

    def m(self, s: int) -> int:
        return schedule.in_flight(s, self.stages, self.extra, self.uniform)

    def speed(self, s: int) -> float:
        return self.speeds[s] if s < len(self.speeds) else 1.0

    def cap(self, s: int) -> int | None:
        return self.caps[s] if s < len(self.caps) else None


def store_of(setting: Setting) -> str:
    mode = store_mode(setting.technique)
    return "auto" if mode == "pairs" and setting.store == "auto" else mode


def unit_times(infos: Sequence[UnitInfo], profile: Sequence[float] | None = None) -> list[float]:
    """Per-unit seconds (fwd + bwd) from a profile, else relative MAC counts (fwd + 2 x fwd)."""
    if profile is not None:
        return list(profile)
    return [3.0 * u.macs for u in infos]


@dataclass(frozen=True)
class StageEstimate:
    """A stage's estimated time and memory (plain data for the plan file)."""

    time: float
    comm: float
    resident: int
    transient: int
    activations: int
    params: int
    m: int
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def memory(self) -> int:
        return self.resident + self.transient + self.activations


def estimate(infos: Sequence[UnitInfo], lo: int, hi: int, s: int, st: Setting) -> StageEstimate:
    """Time and memory of units ``[lo, hi)`` as stage ``s``."""
    part = infos[lo:hi]
    store = store_of(st)
    m = st.m(s)
    sizes = [bounds.UnitSize(u.params, u.pair_elems) for u in part]
    times = list(st.times) if st.times is not None else unit_times(infos)
    compute = sum(times[lo:hi]) * st.speed(s)
    if store in ("pairs", "auto"):
        compute *= 1.0 + (m - 1) * st.replay_share
    comm = 0.0
    if hi < len(infos) and st.bandwidth:
        comm = 2 * st.microbatch * part[-1].out_elems * bounds.FLOAT / st.bandwidth
    res = bounds.resident(store, m, sizes, st.microbatch, st.momentum)
    linear = all(lf.kind == "Linear" for u in part for lf in u.leaves)
    trans = bounds.transient(store, sizes, st.momentum, fused=linear and not st.momentum)
    acts = m * st.microbatch * bounds.FLOAT * sum(u.in_elems + u.pair_elems for u in part)
    return StageEstimate(compute, comm, res, trans, acts, sum(u.params for u in part), m)


def cost_function(infos: Sequence[UnitInfo], objective: str, st: Setting) -> Cost:
    """``cost(i, k, s)`` for :func:`~edgetrain.pipeline.partition.partition`."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}")

    def cost(i: int, k: int, s: int) -> float:
        e = estimate(infos, i, k, s, st)
        cap = st.cap(s)
        if cap is not None and e.memory > cap:
            return math.inf
        if objective == "time":
            return max(e.time, e.comm)
        if objective == "params":
            return float(e.params)
        return e.memory / cap if cap else float(e.memory)

    return cost
