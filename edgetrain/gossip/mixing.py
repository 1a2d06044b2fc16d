"""GoSGD's mixing arithmetic: halve-and-send, weighted merge, and the alpha-weighted average.

Sender i: ``a_i <- a_i / 2`` and sends ``(w_i, a_i)``. Receiver j:
``w_j <- (a_j w_j + a_i w_i) / (a_j + a_i)`` and ``a_j <- a_j + a_i``. The sum of all alphas is
constant, so the alpha-weighted average of the weights is what gossip preserves; it is the
"averaged model" edgetrain evaluates at the end of a run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch


def check_compatible(
    local: Mapping[str, torch.Tensor], remote: Mapping[str, np.ndarray], alpha: object
) -> str | None:
    """Why ``remote`` cannot be merged into ``local`` (a short reason), or None if it can."""
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        return "bad_alpha"
    if not math.isfinite(alpha) or alpha <= 0 or alpha > 1.0 + 1e-6:
        return "bad_alpha"
    if remote.keys() != local.keys():
        return "bad_tensor_names"
    for name, t in local.items():
        r = remote[name]
        if tuple(r.shape) != tuple(t.shape):
            return "bad_tensor_shape"
        if r.dtype.name != str(t.dtype).removeprefix("torch."):
            return "bad_tensor_dtype"
        if not np.isfinite(r).all():
            return "non_finite"
    return None


@torch.no_grad()
def merge_into(
    local: Mapping[str, torch.Tensor],
    alpha_local: float,
    remote: Mapping[str, np.ndarray],
    alpha_remote: float,
) -> float:
    """Merge ``remote`` into ``local`` in place; return the new local alpha."""
    total = alpha_local + alpha_remote
    keep = alpha_local / total
    for name, t in local.items():
        r = torch.from_numpy(np.asarray(remote[name])).to(device=t.device, dtype=t.dtype)
        t.mul_(keep).add_(r, alpha=1.0 - keep)
    return total


def weighted_average(
    states: Sequence[tuple[float, Mapping[str, np.ndarray]]],
) -> dict[str, np.ndarray]:
    """The alpha-weighted mean of several weight sets (alphas need not sum to 1)."""
    if not states:
        raise ValueError("no states to average")
    total = sum(a for a, _ in states)
    if total <= 0:
        raise ValueError("alphas must have a positive sum")
    names = list(states[0][1])
    out: dict[str, np.ndarray] = {}
    for name in names:
        acc = np.zeros_like(np.asarray(states[0][1][name]), dtype=np.float64)
        for a, w in states:
            acc += (a / total) * np.asarray(w[name], dtype=np.float64)
        out[name] = acc.astype(np.asarray(states[0][1][name]).dtype)
    return out
