"""The strategies DynaComm is measured against: sequential, layer-by-layer and iBatch."""

from __future__ import annotations

import numpy as np

from edgetrain.plan.costs import LayerCosts
from edgetrain.plan.simulator import evaluate_forward, prefix


def sequential_cuts(costs: LayerCosts) -> tuple[list[int], list[int]]:
    """Pull everything, compute everything, push everything: one segment each way."""
    return [], []


def lbl_cuts(costs: LayerCosts) -> tuple[list[int], list[int]]:
    """Layer by layer (Poseidon / WFBP): every layer is its own transmission."""
    every = list(range(1, costs.num_layers))
    return every, list(every)


def _greedy_front(pt: np.ndarray, fc: np.ndarray, dt: float) -> list[int]:
    """iBatch's greedy from the front.

    The first segment is the first layer (nothing can overlap its pull). Then, while segment
    (a, b] computes, the next segment's pull should take about as long: the next end c is the
    one whose transmission ``dt + PT[c] - PT[b]`` is closest to the computation
    ``FC[b] - FC[a]`` (ties: the longer segment). ALGORITHMS.md leaves "smallest slack" open;
    this reading makes the pull hide behind the computation as exactly as the layers allow.
    """
    n_layers = len(pt) - 1
    cuts: list[int] = []
    a, b = 0, 1
    while b < n_layers:
        cuts.append(b)
        want = fc[b] - fc[a]
        cs = np.arange(b + 1, n_layers + 1)
        slack = np.abs(dt + pt[cs] - pt[b] - want)
        c = int(cs[len(cs) - 1 - int(np.argmin(slack[::-1]))])
        a, b = b, c
    return cuts


def ibatch_cuts(costs: LayerCosts) -> tuple[list[int], list[int]]:
    """iBatch: the greedy run from the front and from the back, keeping the better forward;
    backward falls back to layer by layer."""
    n_layers = costs.num_layers
    front = _greedy_front(prefix(costs.pt), prefix(costs.fc), costs.dt)
    mirrored = _greedy_front(prefix(costs.pt[::-1]), prefix(costs.fc[::-1]), costs.dt)
    back = sorted(n_layers - c for c in mirrored)
    best = min((front, back), key=lambda cuts: evaluate_forward(costs, cuts))
    return best, lbl_cuts(costs)[1]
