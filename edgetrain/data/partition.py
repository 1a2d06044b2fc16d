"""Split training indices across workers: IID, Dirichlet(alpha) non-IID, or by fractions."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgetrain.errors import DataError

_MAX_DIRICHLET_TRIES = 100


def _by_fractions(order: np.ndarray, fractions: Sequence[float]) -> list[np.ndarray]:
    n = len(order)
    cuts = np.floor(np.cumsum(fractions)[:-1] * n + 0.5).astype(int)
    return [np.sort(p) for p in np.split(order, cuts)]


def _dirichlet(
    labels: np.ndarray, k: int, alpha: float, rng: np.random.Generator
) -> list[np.ndarray]:
    classes = np.unique(labels)
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c in classes:
        members = rng.permutation(np.flatnonzero(labels == c))
        share = rng.dirichlet(np.full(k, alpha))
        cuts = np.floor(np.cumsum(share)[:-1] * len(members) + 0.5).astype(int)
        for i, chunk in enumerate(np.split(members, cuts)):
            parts[i].append(chunk)
    return [np.sort(np.concatenate(p)) if p else np.empty(0, np.int64) for p in parts]


def partition_indices(
    labels: np.ndarray,
    num_parts: int,
    method: str,
    seed: int,
    alpha: float = 0.5,
    fractions: Sequence[float] | None = None,
) -> list[np.ndarray]:
    """Disjoint, sorted index arrays covering ``range(len(labels))``, one per part.

    Deterministic under ``seed``. No part is empty: a Dirichlet draw that leaves one empty is
    drawn again (up to 100 times), then the largest part gives samples to the empty ones.
    """
    n = len(labels)
    if num_parts < 1:
        raise ValueError("num_parts must be at least 1")
    if num_parts > n:
        raise DataError(
            f"cannot split {n} samples across {num_parts} workers", "use fewer workers or more data"
        )
    rng = np.random.default_rng([seed, 0xDA7A])
    if method == "iid":
        return [np.sort(p) for p in np.array_split(rng.permutation(n), num_parts)]
    if method == "fractions":
        if fractions is None or len(fractions) != num_parts:
            raise ValueError("fractions needs one entry per part")
        parts = _by_fractions(rng.permutation(n), fractions)
    elif method == "dirichlet":
        parts = _dirichlet(labels, num_parts, alpha, rng)
        for _ in range(_MAX_DIRICHLET_TRIES):
            if all(len(p) for p in parts):
                break
            parts = _dirichlet(labels, num_parts, alpha, rng)
    else:
        raise ValueError(f"unknown partition method {method!r}")
    return _fill_empty(parts)


def _fill_empty(parts: list[np.ndarray]) -> list[np.ndarray]:
    """Move one sample from the largest part into each empty part."""
    parts = list(parts)
    for i, p in enumerate(parts):
        if len(p) == 0:
            big = max(range(len(parts)), key=lambda j: len(parts[j]))
            parts[i], parts[big] = parts[big][-1:], parts[big][:-1]
    return parts
