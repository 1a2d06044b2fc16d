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


def ibatch_front(pt: np.ndarray, fc: np.ndarray, dt: float) -> list[int]:
    """[DC Alg. 1], greedy from the front (``pt``, ``fc``: prefix sums, ``pt[m]`` = layers 1..m).

    1. Of the pairs 0 < D1 < D2 <= L whose second pull covers the first segment's compute,
       ``dt + PT(D1, D2] >= FC(0, D1]``, keep those with the largest ``FC(0, D1]``, and of those
       the smallest ``dt + PT(0, D1]`` (the smallest such D1). The paper leaves D2 open; ours:
       the smallest slack ``dt + PT(D1, D2] - FC(0, D1]``, the rule of step 2, which is the
       smallest feasible D2.
    2. Then, until the segments reach L: the next end x is the one with the smallest slack
       ``dt + PT(m, x] - FC(n, m] >= 0``, i.e. the smallest feasible x.

    Where no candidate is feasible (compute too heavy for any pull to cover; the paper does
    not say), ours takes the closest to feasible: in step 1 the pair with the smallest deficit
    ``FC - dt - PT`` (its D2 is then L), in step 2 x = L.
    """
    n_layers = len(pt) - 1
    if n_layers < 2:
        return []
    best: tuple[float, float, int] | None = None  # (-FC(0,D1], PT(0,D1], D1)
    for d1 in range(1, n_layers):
        # the largest pull after d1 is the one to L: d1 is feasible iff it covers FC(0, d1]
        if dt + pt[n_layers] - pt[d1] >= fc[d1]:
            key = (-float(fc[d1]), float(pt[d1]), d1)
            best = key if best is None or key < best else best
    if best is None:  # nothing feasible: the pair closest to it
        d1 = min(range(1, n_layers), key=lambda d: (fc[d] - dt - (pt[n_layers] - pt[d]), d))
        d2 = n_layers
    else:
        d1 = best[2]
        d2 = next(x for x in range(d1 + 1, n_layers + 1) if dt + pt[x] - pt[d1] >= fc[d1])
    cuts = [d1]
    n, m = d1, d2
    while m < n_layers:
        cuts.append(m)
        need = fc[m] - fc[n]
        x = next((x for x in range(m + 1, n_layers + 1) if dt + pt[x] - pt[m] >= need), n_layers)
        n, m = m, x
    return cuts


def ibatch_back(pt: np.ndarray, fc: np.ndarray, dt: float) -> list[int]:
    """[DC Alg. 2], the forward decision built from the back (prefix sums as above).

    1. With D_N = L, of the pairs D_{N-2} < D_{N-1} < L whose last pull covers the compute of
       the segment before it, ``dt + PT(D_{N-1}, L] >= FC(D_{N-2}, D_{N-1}]``, keep those with
       the largest ``FC(D_{N-2}, D_{N-1}]``, and of those the smallest ``PT(D_{N-1}, L]``.
    2. Then, down to 0: the next start x < n with the smallest slack
       ``dt + PT(n, m] - FC(x, n] >= 0``, i.e. the smallest feasible x.

    Nothing feasible (ours, the mirror of :func:`ibatch_front`): in step 1 the pair with the
    smallest deficit, in step 2 x = n - 1.
    """
    n_layers = len(pt) - 1
    if n_layers < 2:
        return []
    pairs = [(a, b) for b in range(1, n_layers) for a in range(0, b)]
    feasible = [(a, b) for a, b in pairs if dt + pt[n_layers] - pt[b] >= fc[b] - fc[a]]
    if feasible:
        a, b = min(feasible, key=lambda p: (-(fc[p[1]] - fc[p[0]]), pt[n_layers] - pt[p[1]], p))
    else:
        a, b = min(pairs, key=lambda p: ((fc[p[1]] - fc[p[0]]) - dt - (pt[n_layers] - pt[p[1]]), p))
    cuts = [b]
    n, m = a, b
    while n > 0:
        cuts.insert(0, n)
        cover = dt + pt[m] - pt[n]
        x = next((x for x in range(0, n) if fc[n] - fc[x] <= cover), n - 1)
        n, m = x, n
    return cuts


def ibatch_cuts(costs: LayerCosts) -> tuple[list[int], list[int]]:
    """iBatch as [DC Alg. 1/2] give it: the greedy from the front and the one from the back,
    the faster forward kept; backward is layer by layer."""
    pt, fc = prefix(costs.pt), prefix(costs.fc)
    front = ibatch_front(pt, fc, costs.dt)
    back = ibatch_back(pt, fc, costs.dt)
    best = min((front, back), key=lambda cuts: (evaluate_forward(costs, cuts), cuts))
    return best, lbl_cuts(costs)[1]


def _closest_front(pt: np.ndarray, fc: np.ndarray, dt: float) -> list[int]:
    """The variant edgetrain had before the faithful iBatch: the first segment is layer 1,
    then each next pull is the one whose length is closest to the current segment's compute."""
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


def ibatch_variant_cuts(costs: LayerCosts) -> tuple[list[int], list[int]]:
    """``ibatch-variant``: :func:`_closest_front` from the front and on the mirrored arrays,
    the better forward kept; not the paper's algorithm (see docs), kept for comparison."""
    n_layers = costs.num_layers
    front = _closest_front(prefix(costs.pt), prefix(costs.fc), costs.dt)
    mirrored = _closest_front(prefix(costs.pt[::-1]), prefix(costs.fc[::-1]), costs.dt)
    back = sorted(n_layers - c for c in mirrored)
    best = min((front, back), key=lambda cuts: evaluate_forward(costs, cuts))
    return best, lbl_cuts(costs)[1]
