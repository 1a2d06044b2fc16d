"""DynaComm's optimal decomposition, forward and backward, exact and fast.

Two implementations of the same optimum:

- :func:`paper_forward` / :func:`paper_backward` are the dynamic programmes of ALGORITHMS.md
  §1 as written (O(L^3) time, a ``Path`` table for the traceback). They are the reference.
- :func:`forward` / :func:`backward` are what edgetrain plans with.

  Backward: ``B[m][n]`` never uses ``n``, so the optimum over ``n`` is the one-dimensional
  programme ``B[m] = min_k max(B[k], BC'[m]) + dt + GT'[m] - GT'[k]``: O(L^2), one vector
  operation per ``m``.

  Forward: unrolling ``F`` gives a closed form. With cuts ``0 = k_0 < k_1 < ... < k_n = L``,
  segment ``j``'s pull arrives at ``j*dt + PT[k_j]`` and forward time is
  ``FC[L] + max_j (j*dt + PT[k_j] - FC[k_{j-1}])``, a bottleneck objective. Whether some cut
  set keeps every term at or below a threshold ``tau`` is decided greedily in O(L log L): from
  segment ``j`` ending at ``k``, end the next one at the largest ``k'`` with
  ``PT[k'] <= tau + FC[k] - (j+1)*dt``. The greedy is exact because a state (j, k) dominates
  every (j', k') with ``j <= j'`` and ``k >= k'``: any continuation of the latter, with the
  cuts at or below ``k`` dropped, is a continuation of the former whose terms are no larger
  (``FC`` and ``PT`` are non-decreasing). Bisection on ``tau`` down to floating-point
  resolution then finds the optimum; the cuts of the smallest feasible ``tau`` are returned.

The brute-force tests check both against every one of the 2^(L-1) cut sets for L <= 14.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

import numpy as np

from edgetrain.plan.costs import LayerCosts
from edgetrain.plan.simulator import evaluate_forward, prefix

INF = float("inf")


def _cuts_from_ends(ends: list[int], layers: int) -> list[int]:
    return sorted(e for e in ends if 0 < e < layers)


# --------------------------------------------------------------------------- reference


def _paper_table(
    layers: int, ready: Callable[[int, int], float], span: np.ndarray, extra: float
) -> tuple[float, list[int]]:
    """``T[m][n] = min_k max(T[k][n-1], ready(n, m)) + extra + span[m] - span[k]``, the shape
    both of the paper's programmes share; returns the optimum and the segment ends (traced)."""
    t = np.full((layers + 1, layers + 1), INF)
    path = np.zeros((layers + 1, layers + 1), dtype=np.int64)
    t[0, 0] = 0.0
    for n in range(1, layers + 1):
        for m in range(n, layers + 1):
            ks = np.arange(n - 1, m)
            vals = np.maximum(t[ks, n - 1], ready(n, m)) + extra + (span[m] - span[ks])
            best = int(np.argmin(vals))
            t[m, n] = vals[best]
            path[m, n] = ks[best]
    n_best = int(np.argmin(t[layers]))
    ends, m = [], layers
    for n in range(n_best, 0, -1):
        ends.append(m)
        m = int(path[m, n])
    return float(t[layers, n_best]), ends


def paper_forward(costs: LayerCosts) -> tuple[float, list[int]]:
    """The paper's forward DP: ``F[m][n]`` over the first m layers in n segments."""
    dt, pt = costs.dt, prefix(costs.pt)
    value, ends = _paper_table(costs.num_layers, lambda n, m: n * dt + pt[m], prefix(costs.fc), 0.0)
    return value, _cuts_from_ends(ends, costs.num_layers)


def paper_backward(costs: LayerCosts) -> tuple[float, list[int]]:
    """The paper's backward DP: ``B[m][n]`` over the last m layers in n segments."""
    n_layers, bc = costs.num_layers, prefix(costs.bc[::-1])
    value, counts = _paper_table(n_layers, lambda n, m: bc[m], prefix(costs.gt[::-1]), costs.dt)
    return value, _cuts_from_ends([n_layers - c for c in counts], n_layers)


# --------------------------------------------------------------------------- fast


def backward(costs: LayerCosts) -> tuple[float, list[int]]:
    """Optimal backward time and cuts, O(L^2) with one vector operation per layer."""
    n_layers, dt = costs.num_layers, costs.dt
    bc, gt = prefix(costs.bc[::-1]), prefix(costs.gt[::-1])
    b = np.empty(n_layers + 1)
    path = np.zeros(n_layers + 1, dtype=np.int64)
    b[0] = 0.0
    for m in range(1, n_layers + 1):
        vals = np.maximum(b[:m], bc[m]) - gt[:m]
        k = int(np.argmin(vals))
        b[m] = vals[k] + dt + gt[m]
        path[m] = k
    counts, m = [], n_layers
    while m > 0:
        counts.append(m)
        m = int(path[m])
    return float(b[n_layers]), _cuts_from_ends([n_layers - c for c in counts], n_layers)


def _greedy(pt: list[float], fc: list[float], dt: float, tau: float) -> list[int] | None:
    """Cuts keeping every forward term ``j*dt + PT[k_j] - FC[k_{j-1}]`` <= tau, or None."""
    n_layers = len(pt) - 1
    cuts: list[int] = []
    k, j = 0, 0
    while True:
        j += 1
        reach = bisect_right(pt, tau + fc[k] - j * dt) - 1
        if reach >= n_layers:
            return cuts
        if reach <= k:
            return None
        cuts.append(reach)
        k = reach


def forward(costs: LayerCosts, rel_tol: float = 1e-13) -> tuple[float, list[int]]:
    """Optimal forward time and cuts, by bisection over the bottleneck threshold."""
    dt = costs.dt
    pt_arr, fc_arr = prefix(costs.pt), prefix(costs.fc)
    pt, fc = pt_arr.tolist(), fc_arr.tolist()
    one = dt + pt[-1]  # one segment: always feasible (with room for rounding)
    hi = one + 1e-12 * max(1.0, abs(one))
    lo = max(dt + pt[1], one - fc[-1]) - 1e-12 * max(1.0, abs(hi))
    best = _greedy(pt, fc, dt, hi)
    assert best is not None
    if (at_lo := _greedy(pt, fc, dt, lo)) is not None:
        hi, best = lo, at_lo
    else:
        for _ in range(200):
            if hi - lo <= rel_tol * max(1.0, abs(hi)):
                break
            mid = 0.5 * (lo + hi)
            found = _greedy(pt, fc, dt, mid)
            if found is None:
                lo = mid
            else:
                hi, best = mid, found
    return evaluate_forward(costs, best), best
