"""DLion's compute-capacity-aware batch sizes (gossip.md B.3): every worker's minibatch takes
about the same time T_unit, the total stays at most T_bs. Pure.

A worker's capacity is a curve C_j(m), samples per second at batch size m (measured by a pilot
at the start of a run, or read from ``edgetrain profile``'s ``throughput``), interpolated
linearly between measured sizes and held flat beyond them. The paper gives no T_unit and no
epsilon; the specification's rule (ours, marked so there) is:

1. ``equal-total``: T_unit = k b0 / sum_j C_j(b0), so the total batch stays k b0 (the uniform
   baseline's) and any speed-up comes from balance alone; ``slowest``: T_unit = b0 / C_min, the
   slowest worker keeps b0 and the total grows.
2. m_j = C_j T_unit, rounded so that the total is exact (largest remainders, at least 1 each).
3. Capacity depends on the batch size, so step 2 is solved at each worker's own m_j: the
   specification proposes three rounds of a fixed point (C_j <- C_j(m_j)), which diverges when
   small batches are much less efficient (a slow worker's batch shrinks, its capacity with it,
   round after round); here it is solved exactly instead (ours): each worker's step time
   m / C_j(m) rises with m, so for a time T every worker's m_j(T) with m_j / C_j(m_j) = T is
   found by bisection, and T by bisection so that the m_j(T) sum to the total.
4. Above T_bs the total is cut to T_bs (the same solve at the smaller total).
5. The achieved spread, max_j |m_j / C_j(m_j) - T_unit| / T_unit, is reported beside epsilon.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Curve = Sequence[tuple[int, float]]  # (batch size, samples per second), any order
Rule = Literal["equal-total", "slowest"]
T_BS_FRACTION = 0.10  # DLion §3.1: T_bs is about 10% of the training set


@dataclass(frozen=True)
class BatchPlan:
    """The batch size of every worker and what it achieves."""

    batches: tuple[int, ...]
    t_unit: float  # seconds a minibatch should take on every worker
    capacities: tuple[float, ...]  # C_j(m_j), samples/s
    times: tuple[float, ...]  # m_j / C_j(m_j), seconds
    spread: float  # max_j |times_j - t_unit| / t_unit
    epsilon: float
    t_bs: int | None
    capped: bool  # the total was cut to t_bs
    rule: str

    @property
    def total(self) -> int:
        return sum(self.batches)

    @property
    def within_epsilon(self) -> bool:
        return self.spread <= self.epsilon + 1e-12

    def as_dict(self) -> dict[str, object]:
        return {
            "batches": list(self.batches),
            "t_unit": self.t_unit,
            "capacities": list(self.capacities),
            "times": list(self.times),
            "spread": self.spread,
            "epsilon": self.epsilon,
            "within_epsilon": self.within_epsilon,
            "total": self.total,
            "t_bs": self.t_bs,
            "capped": self.capped,
            "rule": self.rule,
        }


def _times(curve: Curve) -> list[tuple[int, float]]:
    """The curve as (batch, step seconds), sorted, made non-decreasing (a larger batch never
    takes less time; timing noise can make a measured curve dip)."""
    points = sorted((int(b), float(c)) for b, c in curve)
    if not points:
        raise ValueError("a capacity curve needs at least one (batch, samples/s) point")
    if any(b < 1 or c <= 0 or not math.isfinite(c) for b, c in points):
        raise ValueError("batch sizes must be positive, capacities positive and finite")
    out: list[tuple[int, float]] = []
    for b, c in points:
        t = b / c
        out.append((b, max(t, out[-1][1]) if out else t))
    return out


def step_time(curve: Curve, m: float) -> float:
    """Seconds a minibatch of ``m`` takes: linear between the measured sizes; below the
    smallest, the first segment's line (a step has a fixed part) but never faster per sample
    than at the smallest; beyond the largest, the largest one's capacity."""
    pts = _times(curve)
    b1, t1 = pts[0]
    if m <= b1:
        if len(pts) > 1 and pts[1][0] > b1:
            slope = (pts[1][1] - t1) / (pts[1][0] - b1)
            return max(t1 * m / b1, min(t1, t1 + (m - b1) * slope))
        return t1 * m / b1
    for (ba, ta), (bb, tb) in zip(pts, pts[1:], strict=False):
        if m <= bb:
            return ta + (tb - ta) * (m - ba) / (bb - ba) if bb > ba else tb
    bn, tn = pts[-1]
    return tn * m / bn


def capacity_at(curve: Curve, m: float) -> float:
    """C(m) = m / step_time(m), samples per second at batch size m."""
    return m / step_time(curve, m) if m > 0 else capacity_at(curve, 1e-9)


def apportion(total: int, weights: Sequence[float], minimum: int = 1) -> tuple[int, ...]:
    """``total`` split in proportion to ``weights`` with whole numbers summing to it exactly
    (largest remainders, ties to the lower index), each at least ``minimum``."""
    k = len(weights)
    if k == 0:
        return ()
    if total < minimum * k:
        raise ValueError(f"cannot give {k} workers at least {minimum} of {total}")
    wsum = float(sum(weights))
    if wsum <= 0:
        raise ValueError("weights must have a positive sum")
    exact = [total * w / wsum for w in weights]
    out = [max(minimum, math.floor(x)) for x in exact]
    # largest remainders first, ties to the lower index
    order = sorted(range(k), key=lambda j: (-(exact[j] - math.floor(exact[j])), j))
    i = 0
    while sum(out) < total:
        out[order[i % k]] += 1
        i += 1
    while sum(out) > total:  # minimums pushed it over: take from the most over their share
        j = max((j for j in range(k) if out[j] > minimum), key=lambda j: (out[j] - exact[j], -j))
        out[j] -= 1
    return tuple(out)


def default_t_bs(n_train: int, knee: int | None = None, start_total: int = 0) -> int:
    """T_bs = min(10% of the training set, the sweep's knee) (gossip.md B.3, ours), never below
    ``start_total``, the run's starting total batch (k b0): a cap under it would cut DLion's
    total below the no-batching baseline's from the first iteration, and stop SpeedUpBS from
    ever raising it, where the two are meant to compare at the same total (ours)."""
    ten = max(1, math.floor(T_BS_FRACTION * n_train))
    cap = min(ten, knee) if knee is not None else ten
    return max(cap, start_total)


def _evaluate(
    curves: Sequence[Curve], batches: Sequence[int], t_unit: float, eps: float
) -> tuple[tuple[float, ...], tuple[float, ...], float]:
    caps = tuple(capacity_at(c, m) for c, m in zip(curves, batches, strict=True))
    times = tuple(m / c for m, c in zip(batches, caps, strict=True))
    spread = max(abs(t - t_unit) / t_unit for t in times)
    return caps, times, spread


def batch_for_time(curve: Curve, t: float, upper: float) -> float:
    """The (real-valued) batch whose step takes ``t`` seconds, by bisection on [0, upper]."""
    lo, hi = 0.0, upper
    if step_time(curve, hi) <= t:
        return hi
    for _ in range(60):
        mid = (lo + hi) / 2
        if step_time(curve, mid) <= t:
            lo = mid
        else:
            hi = mid
    return lo


def equal_time_batches(
    curves: Sequence[Curve], total: int, minimum: int = 1
) -> tuple[tuple[int, ...], float]:
    """Whole batch sizes summing to ``total`` (at least ``minimum`` each) whose step times are
    as equal as the curves allow, and that common time."""
    upper = float(total)
    lo, hi = 0.0, max(step_time(c, upper) for c in curves)
    for _ in range(80):
        mid = (lo + hi) / 2
        if sum(batch_for_time(c, mid, upper) for c in curves) < total:
            lo = mid
        else:
            hi = mid
    real = [max(batch_for_time(c, hi, upper), 1e-9) for c in curves]
    return apportion(total, real, minimum), hi


def plan_batches(
    curves: Sequence[Curve],
    b0: int,
    t_bs: int | None = None,
    epsilon: float = 0.10,
    rule: Rule = "equal-total",
    minimum: int = 1,
) -> BatchPlan:
    """Capacity-proportional batch sizes (see the module's rule), each at least ``minimum``
    (a floor that keeps a slow worker's gradient meaningful; lowered where the total cannot
    give every worker that much)."""
    k = len(curves)
    if k == 0:
        raise ValueError("no workers to plan for")
    if b0 < 1:
        raise ValueError("the base batch size must be at least 1")
    if rule == "equal-total":
        total = k * b0
    else:  # the slowest worker keeps b0: everyone gets b0's time on the slowest
        slowest = max(step_time(c, b0) for c in curves)
        total = max(k, round(sum(batch_for_time(c, slowest, 64.0 * k * b0) for c in curves)))
    capped = t_bs is not None and total > t_bs
    if capped:
        assert t_bs is not None
        total = max(t_bs, k)
    batches, _ = equal_time_batches(curves, total, max(1, min(minimum, total // k)))
    caps = [capacity_at(c, m) for c, m in zip(curves, batches, strict=True)]
    t_unit = sum(batches) / sum(caps)  # the time that makes sum_j C_j(m_j) T_unit the total
    achieved, times, spread = _evaluate(curves, batches, t_unit, epsilon)
    return BatchPlan(batches, t_unit, achieved, times, spread, epsilon, t_bs, capped, rule)


def uniform_plan(
    curves: Sequence[Curve], b0: int, t_bs: int | None = None, epsilon: float = 0.10
) -> BatchPlan:
    """Every worker b0 (capacity-aware batching off): T_unit is the slowest worker's time,
    and the spread shows how long the others wait."""
    k = len(curves)
    batches = (b0,) * k
    caps = [capacity_at(c, b0) for c in curves]
    t_unit = b0 / min(caps)
    achieved, times, spread = _evaluate(curves, batches, t_unit, epsilon)
    return BatchPlan(batches, t_unit, achieved, times, spread, epsilon, t_bs, False, "uniform")
