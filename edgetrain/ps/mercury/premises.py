"""The premises of group-wise sampling, measured (R-M7; [MC Fig. 3, Fig. 6]). Pure.

How slowly loss ranks move: the share of samples whose rank (as a fraction of N) moves less
than 5% and 10% between two scorings; and how concentrated importance is: the share of the
total loss held by the top 10% of samples.
"""

from __future__ import annotations

import numpy as np


def ranks(losses: np.ndarray) -> np.ndarray:
    """Each sample's rank (0: the smallest loss; ties by index)."""
    order = np.argsort(np.asarray(losses), kind="stable")
    out = np.empty(len(order), dtype=np.int64)
    out[order] = np.arange(len(order))
    return out


def rank_moves(before: np.ndarray, after: np.ndarray) -> dict[str, float]:
    """Shares of samples whose rank moved less than 5% and less than 10% of N."""
    n = len(before)
    if n == 0 or len(after) != n:
        raise ValueError("rank_moves needs two scorings of the same samples")
    moved = np.abs(ranks(before) - ranks(after)) / n
    return {"under_5pct": float((moved < 0.05).mean()), "under_10pct": float((moved < 0.10).mean())}


def top_share(losses: np.ndarray, fraction: float = 0.1) -> float:
    """The share of the total loss held by the top ``fraction`` of samples."""
    arr = np.sort(np.asarray(losses, dtype=np.float64))[::-1]
    total = float(arr.sum())
    if total <= 0 or not len(arr):
        return 0.0
    k = max(1, int(round(fraction * len(arr))))
    return float(arr[:k].sum() / total)
