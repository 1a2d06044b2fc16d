"""Split training indices across workers: IID, Dirichlet(alpha) non-IID, or by fractions."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgetrain.data.dataset import derive_seed
from edgetrain.errors import DataError

METHODS = ("iid", "dirichlet", "fractions")
_MAX_DIRICHLET_DRAWS = 100
_SALT = 0xDA7A


def _split_by_shares(order: np.ndarray, shares: np.ndarray) -> list[np.ndarray]:
    """Cut ``order`` into consecutive chunks whose sizes follow ``shares`` (summing to 1)."""
    cuts = np.floor(np.cumsum(shares)[:-1] * len(order) + 0.5).astype(np.int64)
    return np.split(order, np.clip(cuts, 0, len(order)))


def _dirichlet(
    labels: np.ndarray, k: int, alpha: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """Per class, share that class's samples among the parts by a Dirichlet(alpha) draw."""
    chunks: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        for i, piece in enumerate(_split_by_shares(members, rng.dirichlet(np.full(k, alpha)))):
            chunks[i].append(piece)
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in chunks]


def _fill_empty(parts: list[np.ndarray]) -> list[np.ndarray]:
    """Move one sample from the currently largest part into each empty part."""
    parts = list(parts)
    for i, p in enumerate(parts):
        if len(p) == 0:
            big = max(range(len(parts)), key=lambda j: len(parts[j]))
            parts[i], parts[big] = parts[big][-1:], parts[big][:-1]
    return parts


def _check(
    n: int, num_parts: int, method: str, alpha: float, fractions: Sequence[float] | None
) -> None:
    if method not in METHODS:
        raise ValueError(f"unknown partition method {method!r}; use one of {', '.join(METHODS)}")
    if num_parts < 1:
        raise ValueError(f"num_parts must be at least 1 (got {num_parts})")
    if num_parts > n:
        raise DataError(
            f"cannot split {n} samples across {num_parts} workers",
            "use fewer workers or more data",
        )
    if method == "dirichlet" and not alpha > 0:
        raise ValueError(f"dirichlet alpha must be positive (got {alpha})")
    if method == "fractions":
        if fractions is None or len(fractions) != num_parts:
            got = "none" if fractions is None else len(fractions)
            raise ValueError(f"fractions needs one entry per part ({num_parts}); got {got}")
        if any(not f > 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
            raise ValueError(f"fractions must be positive and sum to 1 (got {list(fractions)})")


def partition_indices(
    labels: np.ndarray,
    num_parts: int,
    method: str,
    seed: int,
    alpha: float = 0.5,
    fractions: Sequence[float] | None = None,
) -> list[np.ndarray]:
    """Disjoint, sorted int64 index arrays covering ``range(len(labels))``, one per part.

    - ``iid``: shuffle, then split evenly (sizes differ by at most one).
    - ``dirichlet``: per class, shares drawn from Dirichlet(``alpha``) over the parts; small
      alpha gives each part few classes, large alpha approaches IID.
    - ``fractions``: shuffle, then split by ``fractions`` (one per part, summing to 1).

    Deterministic under ``seed``. No part is empty: a Dirichlet draw that leaves one empty is
    drawn again (up to 100 times); after that, or when rounding empties a part, the largest
    part gives one sample to each empty one.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-d (got shape {labels.shape})")
    n = len(labels)
    _check(n, num_parts, method, alpha, fractions)
    rng = np.random.default_rng(derive_seed(seed, _SALT))
    if method == "iid":
        return [np.sort(p) for p in np.array_split(rng.permutation(n), num_parts)]
    if method == "fractions":
        assert fractions is not None
        shares = np.asarray(fractions, dtype=np.float64)
        parts = [np.sort(p) for p in _split_by_shares(rng.permutation(n), shares / shares.sum())]
    else:
        parts = _dirichlet(labels, num_parts, alpha, rng)
        for _ in range(_MAX_DIRICHLET_DRAWS - 1):
            if all(len(p) for p in parts):
                break
            parts = _dirichlet(labels, num_parts, alpha, rng)
    return _fill_empty(parts)
