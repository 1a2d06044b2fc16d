"""An asynchronous pipeline's steady pace as a closed cycle of microbatches. Pure.

Stage 0 admits a new microbatch only when one of its ``m_0`` in flight has come back, so
``m_0`` microbatches go round one cycle: every stage (forward, and backward on the way back:
one visit of its whole work per microbatch), every link, and the links' latency. Where the
cycle's stations take fixed times the pace is the largest of three bounds: the slowest
station, and the round trip over ``m_0`` (Little's law). Measured stages take varying times
(a CPU quota's stops, the machine's own noise), so a microbatch that reaches a busy stage
waits, and a cycle whose bounds are close together runs slower than all of them.

:func:`period` answers with the mean-value analysis of a closed network (Reiser and
Lavenberg): for ``n = 1 .. m_0`` microbatches, a microbatch reaching station ``k`` waits for
the ``Q_k(n-1) - U_k(n-1)`` waiting ahead of it, a whole service each, and for the residual of
the one in service; ``R_k(n) = S_k (1 + Q_k(n-1) - U_k(n-1) (1 - c2) / 2)`` with ``c2`` the
service times' squared coefficient of variation (1: exponential, where this is exact; 0:
fixed times, an approximation); ``X(n) = n / sum R_k(n)``, ``Q_k(n) = X(n) R_k(n)``,
``U_k(n) = X(n) S_k``. A pure delay (a link's latency) keeps no queue. The answer is never
below the slowest station (the approximation can overshoot the bound at many microbatches).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Station:
    """One place of the cycle: seconds per microbatch; ``queue`` False for a pure delay."""

    service_s: float
    queue: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.service_s) and self.service_s >= 0):
            raise ValueError(f"a station's service must be >= 0 seconds, not {self.service_s!r}")


def period(stations: Sequence[Station], tokens: int, c2: float = 0.0) -> float:
    """Seconds between microbatches when ``tokens`` go round ``stations`` (see the module).
    ``tokens`` 1 gives the round trip."""
    if tokens < 1:
        raise ValueError("a cycle needs at least one microbatch in flight")
    if not (math.isfinite(c2) and c2 >= 0):
        raise ValueError("the squared coefficient of variation must be >= 0")
    if not stations:
        raise ValueError("a cycle needs at least one station")
    queue = [0.0] * len(stations)
    busy = [0.0] * len(stations)
    cycle = 0.0
    for n in range(1, tokens + 1):
        resp = [
            st.service_s * (1.0 + queue[k] - busy[k] * (1.0 - c2) / 2.0)
            if st.queue
            else st.service_s
            for k, st in enumerate(stations)
        ]
        cycle = sum(resp)
        if cycle <= 0:
            return 0.0
        rate = n / cycle
        queue = [rate * r for r in resp]
        busy = [rate * st.service_s if st.queue else 0.0 for st in stations]
    slowest = max((st.service_s for st in stations if st.queue), default=0.0)
    return max(cycle / tokens, slowest)
