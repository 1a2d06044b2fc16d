"""Timeline simulator: the forward, backward and iteration time of a decomposition decision.

Model (ALGORITHMS.md §1), with the choices the text leaves open written down:
- Forward. Segment j (layers k_{j-1}+1..k_j) is one pull of ``dt + sum(pt)``; pulls run back to
  back on the link from time 0, so pull j arrives at ``j*dt + PT[k_j]``. Its forward compute
  starts when both that pull and the previous segment's compute are done.
- Backward. Backward compute runs L..1 without waiting (time 0 = the start of backward).
  A backward segment is a run of consecutive layers; its push (``dt + sum(gt)``) starts when
  the backward of its last (lowest) layer is done and the link is free.
- The iteration time is forward time plus backward time. Across iterations this is also the
  steady state: the next iteration's first pull carries layer 1, whose gradient is in this
  iteration's last push (backward ends at layer 1), so no pull of the next iteration can start
  before every push of this one has ended when transmissions share the link and pulls go in
  layer order, as this model has it. Minimising each direction therefore minimises the
  steady-state iteration time too. (A full-duplex link that pulled later layers while layer 1's
  gradient is still being pushed could overlap iterations; that is not modelled.)
Cuts are 1-based forward layer indices after which a segment ends, the compulsory end at L
excluded; backward cuts use the same indices (cut i separates layers i and i+1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from edgetrain.plan.costs import LayerCosts


@dataclass(frozen=True)
class Span:
    """One mini-procedure on a lane: a pull, push, or a segment's forward/backward compute."""

    phase: str  # forward | backward
    lane: str  # comm | compute
    kind: str  # pull | forward | backward | push
    segment: int  # 1-based, in the order the phase runs them
    first_layer: int  # 1-based forward indices, inclusive
    last_layer: int
    start: float
    end: float

    def to_dict(self) -> dict[str, object]:
        return {
            "phase": self.phase,
            "lane": self.lane,
            "kind": self.kind,
            "segment": self.segment,
            "layers": [self.first_layer, self.last_layer],
            "start": self.start,
            "end": self.end,
        }


@dataclass(frozen=True)
class Timeline:
    forward_s: float
    backward_s: float
    spans: tuple[Span, ...] = field(default=())

    @property
    def iteration_s(self) -> float:
        return self.forward_s + self.backward_s


def check_cuts(cuts: Sequence[int], layers: int) -> list[int]:
    """Sorted, de-duplicated cuts; raises ValueError for a cut outside 1..L-1."""
    out = sorted({int(c) for c in cuts})
    if out and (out[0] < 1 or out[-1] > layers - 1):
        raise ValueError(f"cuts must lie in 1..{layers - 1}")
    return out


def forward_time(costs: LayerCosts, cuts: Sequence[int]) -> tuple[float, list[Span]]:
    ends = [*check_cuts(cuts, costs.num_layers), costs.num_layers]
    spans: list[Span] = []
    link = compute = 0.0
    begin = 0
    for j, end in enumerate(ends, start=1):
        pull_start = link
        link = pull_start + costs.dt + float(costs.pt[begin:end].sum())
        start = max(compute, link)
        compute = start + float(costs.fc[begin:end].sum())
        spans.append(Span("forward", "comm", "pull", j, begin + 1, end, pull_start, link))
        spans.append(Span("forward", "compute", "forward", j, begin + 1, end, start, compute))
        begin = end
    return compute, spans


def backward_time(costs: LayerCosts, cuts: Sequence[int]) -> tuple[float, list[Span]]:
    n_layers = costs.num_layers
    # Segment boundaries in backward order: from layer L down to 1.
    lows = [c + 1 for c in sorted(check_cuts(cuts, n_layers), reverse=True)] + [1]
    spans: list[Span] = []
    link = compute = 0.0
    high = n_layers
    for j, low in enumerate(lows, start=1):
        start = compute
        compute = start + float(costs.bc[low - 1 : high].sum())
        spans.append(Span("backward", "compute", "backward", j, low, high, start, compute))
        push_start = max(link, compute)
        link = push_start + costs.dt + float(costs.gt[low - 1 : high].sum())
        spans.append(Span("backward", "comm", "push", j, low, high, push_start, link))
        high = low - 1
    return link, spans


def simulate(
    costs: LayerCosts, forward_cuts: Sequence[int], backward_cuts: Sequence[int]
) -> Timeline:
    """The predicted times of one iteration, and every mini-procedure's start and end."""
    f, fspans = forward_time(costs, forward_cuts)
    b, bspans = backward_time(costs, backward_cuts)
    return Timeline(f, b, tuple(fspans + bspans))


def evaluate_forward(costs: LayerCosts, cuts: Sequence[int]) -> float:
    return forward_time(costs, cuts)[0]


def evaluate_backward(costs: LayerCosts, cuts: Sequence[int]) -> float:
    return backward_time(costs, cuts)[0]


def prefix(values: np.ndarray) -> np.ndarray:
    """Prefix sums with a leading 0: ``out[m] = sum(values[:m])``."""
    return np.concatenate(([0.0], np.cumsum(values)))
