"""Aggregated points: exact per-feature means of each subset's original samples; CSR membership."""

from __future__ import annotations

import numpy as np

_BLOCK_ROWS = 8192


def membership(subset_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(offsets, indices)``: subset m's members are ``indices[offsets[m]:offsets[m+1]]``.

    ``subset_ids`` gives each sample's subset (0..M-1, none empty); members stay in ascending
    sample order.
    """
    ids = np.asarray(subset_ids, dtype=np.int64)
    if ids.ndim != 1:
        raise ValueError(f"subset ids must be 1-d (got shape {ids.shape})")
    if len(ids) == 0:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    sizes = np.bincount(ids)
    if ids.min() < 0 or (sizes == 0).any():
        raise ValueError("subset ids must run 0..M-1 with no empty subset")
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return offsets, np.argsort(ids, kind="stable").astype(np.int64)


def member_means(x: np.ndarray, offsets: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Per-feature mean of each subset's rows of ``x`` (N, ...), as float32 (M, ...).

    Sums accumulate in float64 over blocks of about 8192 rows, so the mean is exact to float32
    rounding and memory stays bounded.
    """
    m = len(offsets) - 1
    flat = x.reshape(len(x), -1)
    out = np.empty((m, flat.shape[1]), dtype=np.float32)
    sizes = np.diff(offsets)
    start = 0
    while start < m:
        stop = int(np.searchsorted(offsets, offsets[start] + _BLOCK_ROWS, side="right")) - 1
        stop = min(m, max(stop, start + 1))
        lo, hi = int(offsets[start]), int(offsets[stop])
        rows = flat[indices[lo:hi]]
        sums = np.add.reduceat(rows, offsets[start:stop] - lo, axis=0, dtype=np.float64)
        out[start:stop] = sums / sizes[start:stop, None]
        start = stop
    return out.reshape(m, *x.shape[1:])


def subset_labels(labels: np.ndarray, offsets: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Each subset's class (the label of its first member; subsets never mix classes)."""
    firsts: np.ndarray = np.asarray(labels, dtype=np.int64)[indices[offsets[:-1]]]
    return firsts


def subset_sizes(offsets: np.ndarray) -> np.ndarray:
    return np.diff(np.asarray(offsets, dtype=np.int64))
