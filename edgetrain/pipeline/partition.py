"""Cut L units into N contiguous, non-empty stages, minimising the largest stage cost. Pure.

An exact dynamic programme over cut points (not torchgpipe's heuristic): ``cost(i, k, s)`` is
the cost of units ``[i, k)`` on stage ``s`` (it may depend on the stage: its host's speed,
memory cap, window), ``inf`` where they cannot go there. Among partitions with the smallest
bottleneck it picks the smallest sum of squared stage costs (within a relative ``tol``), then
the lexicographically smallest cut vector, so the answer is unique and deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from edgetrain.errors import EdgetrainError

Cost = Callable[[int, int, int], float]


class PartitionError(EdgetrainError, ValueError):
    """No partition satisfies the constraints (more stages than units, a unit over a cap)."""


@dataclass(frozen=True)
class Partition:
    """Each stage's units ``[lo, hi)``, each stage's cost and the largest one."""

    bounds: tuple[tuple[int, int], ...]
    costs: tuple[float, ...]

    @property
    def bottleneck(self) -> float:
        return max(self.costs)

    @property
    def cuts(self) -> tuple[int, ...]:
        """Where each stage but the first starts."""
        return tuple(lo for lo, _ in self.bounds[1:])

    @property
    def sizes(self) -> list[int]:
        return [hi - lo for lo, hi in self.bounds]


def bounds_of(sizes: list[int]) -> tuple[tuple[int, int], ...]:
    """Units per stage -> each stage's ``[lo, hi)``."""
    out, lo = [], 0
    for k in sizes:
        out.append((lo, lo + k))
        lo += k
    return tuple(out)


def partition(units: int, stages: int, cost: Cost, tol: float = 1e-9) -> Partition:
    """The optimal partition of ``units`` into ``stages`` (see the module docstring)."""
    if stages < 1:
        raise PartitionError("a pipeline needs at least one stage")
    if stages > units:
        raise PartitionError(
            f"{stages} stages cannot share {units} units (each stage needs at least one)",
            "use fewer stage workers",
        )
    inf = math.inf
    c = {(i, k, s): cost(i, k, s) for s in range(stages) for i in range(units)
         for k in range(i + 1, units + 1)}  # fmt: skip
    # best[s][k]: smallest bottleneck for units [0, k) on stages 0..s
    best = [[inf] * (units + 1) for _ in range(stages)]
    for k in range(1, units + 1):
        best[0][k] = c[0, k, 0]
    for s in range(1, stages):
        for k in range(s + 1, units + 1):
            best[s][k] = min((max(best[s - 1][i], c[i, k, s]) for i in range(s, k)), default=inf)
    limit = best[stages - 1][units]
    if limit == inf:
        raise PartitionError("no partition fits: some unit cannot go on any stage it must")
    # suffix DP of the squared sum under the bottleneck: sq[s][i] for units [i, L) on s..N-1
    sq = [[inf] * (units + 1) for _ in range(stages + 1)]
    sq[stages][units] = 0.0
    for s in range(stages - 1, -1, -1):
        for i in range(units - 1, -1, -1):
            options = [
                c[i, k, s] ** 2 + sq[s + 1][k]
                for k in range(i + 1, units + 1)
                if c[i, k, s] <= limit and sq[s + 1][k] < inf
            ]
            sq[s][i] = min(options, default=inf)
    budget = sq[0][0] * (1 + tol) + tol
    out, costs, i = [], [], 0
    for s in range(stages):
        for k in range(i + 1, units + 1):
            ck = c[i, k, s]
            if ck <= limit and sq[s + 1][k] < inf and ck**2 + sq[s + 1][k] <= budget:
                out.append((i, k))
                costs.append(ck)
                budget -= ck**2
                i = k
                break
        else:  # pragma: no cover - the DP above guarantees a choice
            raise PartitionError("partition search failed")
    return Partition(tuple(out), tuple(costs))


def partition_paced(
    units: int, stages: int, cost: Cost, trip: Cost, window: int, tol: float = 1e-9
) -> Partition:
    """The partition with the shortest period ``max(bottleneck, sum of trip(i, k, s) / window)``:
    an asynchronous pipeline's pace when stage 0's ``window`` microbatches in flight must cover
    one microbatch's round trip (``trip``: a stage's share of it, its compute and link). Exact:
    the min-max partition (:func:`partition`, with its tie-breaks) unless the window binds;
    then each candidate bottleneck T gets the least round trip with every stage cost within T
    (the longer the bottleneck allowed, the shorter the trip, so a bisection over the stage
    costs finds the crossing), and a strictly faster partition replaces the min-max one."""
    base = partition(units, stages, cost, tol)
    c = {(i, k, s): cost(i, k, s) for s in range(stages) for i in range(units)
         for k in range(i + 1, units + 1)}  # fmt: skip
    r = {key: trip(*key) for key in c}

    def period(bounds: tuple[tuple[int, int], ...]) -> float:
        keys = [(lo, hi, s) for s, (lo, hi) in enumerate(bounds)]
        return max(max(c[k] for k in keys), sum(r[k] for k in keys) / window)

    first = period(base.bounds)
    if first <= base.bottleneck * (1 + tol):
        return base
    limits = sorted({v for v in c.values() if base.bottleneck <= v < math.inf})

    def paced(j: int) -> tuple[float, tuple[tuple[int, int], ...]]:
        bounds = _least_trip(units, stages, c, r, limits[j], tol)
        return period(bounds), bounds

    lo, hi = 0, len(limits)  # the first limit at or past the crossing
    while lo < hi:
        mid = (lo + hi) // 2
        if limits[mid] * window >= sum(r[b, e, s] for s, (b, e) in enumerate(paced(mid)[1])):
            hi = mid
        else:
            lo = mid + 1
    options = [paced(j) for j in (lo - 1, lo) if 0 <= j < len(limits)]
    best, bounds = min(options, key=lambda o: o[0])
    if best >= first * (1 - tol):
        return base
    return Partition(bounds, tuple(c[b, e, s] for s, (b, e) in enumerate(bounds)))


def _least_trip(
    units: int,
    stages: int,
    c: dict[tuple[int, int, int], float],
    r: dict[tuple[int, int, int], float],
    limit: float,
    tol: float,
) -> tuple[tuple[int, int], ...]:
    """The cuts with the least sum of ``r`` among those whose every stage cost is within
    ``limit`` (the lexicographically smallest among ties)."""
    inf = math.inf
    least = [[inf] * (units + 1) for _ in range(stages + 1)]
    least[stages][units] = 0.0
    for s in range(stages - 1, -1, -1):
        for i in range(units - 1, -1, -1):
            least[s][i] = min(
                (r[i, k, s] + least[s + 1][k] for k in range(i + 1, units + 1)
                 if c[i, k, s] <= limit and least[s + 1][k] < inf),
                default=inf,
            )  # fmt: skip
    out, i = [], 0
    for s in range(stages):
        goal = least[s][i] * (1 + tol) + tol
        k = next(
            k for k in range(i + 1, units + 1)
            if c[i, k, s] <= limit and r[i, k, s] + least[s + 1][k] <= goal
        )  # fmt: skip
        out.append((i, k))
        i = k
    return tuple(out)
