"""Similarity-preserving division within each class: k-means (faiss), LSH buckets, GMM."""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator

import numpy as np

from edgetrain.data.dataset import derive_seed

DIVIDERS = ("kmeans", "lsh", "gmm")
KMEANS_ITERATIONS = 20
KMEANS_FLAT_LIMIT = 256  # centroids per class above which k-means goes two-level
_SALT = 0xD1F
_MAX_BITS = 62
_LSH_TRIES = 8

Divider = Callable[[np.ndarray, int, int], np.ndarray]


def apportion(counts: np.ndarray, total: int) -> np.ndarray:
    """Share ``total`` among groups in proportion to ``counts`` (largest remainders).

    Every non-empty group gets at least one and no group more than its count, so the sum can
    differ slightly from ``total`` when those bounds bite.
    """
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if n == 0:
        return np.zeros_like(counts)
    quota = counts * total / n
    k = np.floor(quota).astype(np.int64)
    for i in np.argsort(-(quota - k), kind="stable")[: max(0, total - int(k.sum()))]:
        k[i] += 1
    shares: np.ndarray = np.minimum(np.maximum(k, (counts > 0).astype(np.int64)), counts)
    return shares


def subsets_per_class(counts: np.ndarray, ratio: int) -> np.ndarray:
    """How many subsets each class gets: M = ceil(N / ratio) shared in proportion to class size.

    A class with at most ``ratio`` samples gets one subset (see :func:`apportion`).
    """
    counts = np.asarray(counts, dtype=np.int64)
    k = apportion(counts, -(-int(counts.sum()) // ratio))
    small = counts <= ratio
    k[small] = np.minimum(counts[small], 1)
    return k


def _faiss_kmeans(data: np.ndarray, k: int, seed: int, iterations: int) -> np.ndarray:
    """Centroids of faiss k-means on ``data`` (float32), seeded, no subsampling."""
    import faiss

    km = faiss.Kmeans(
        data.shape[1],
        k,
        niter=iterations,
        seed=seed % 2**31,
        min_points_per_centroid=1,
        max_points_per_centroid=max(256, -(-len(data) // k)),
        verbose=False,
    )
    km.train(data)
    return np.asarray(km.centroids, dtype=np.float32)


def _nearest(data: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    import faiss

    index = faiss.IndexFlatL2(data.shape[1])
    index.add(centroids)
    _, ids = index.search(data, 1)
    return np.asarray(ids[:, 0], dtype=np.int64)


def _two_level(data: np.ndarray, k: int, seed: int, iterations: int) -> np.ndarray:
    """About sqrt(k) coarse clusters, then each one's share of the k centroids inside it."""
    coarse_k = max(2, round(math.sqrt(k)))
    coarse = _nearest(data, _faiss_kmeans(data, coarse_k, seed, iterations))
    groups = [np.flatnonzero(coarse == g) for g in range(coarse_k)]
    shares = apportion(np.array([len(g) for g in groups]), k)
    parts = []
    for g, (members, share) in enumerate(zip(groups, shares, strict=True)):
        if share >= len(members):
            parts.append(data[members])
        elif share > 1:
            parts.append(_faiss_kmeans(data[members], int(share), seed + g + 1, iterations))
        elif share == 1:
            parts.append(data[members].mean(axis=0, keepdims=True))
    return np.ascontiguousarray(np.vstack(parts), dtype=np.float32)


def kmeans(
    z: np.ndarray,
    k: int,
    seed: int,
    iterations: int = KMEANS_ITERATIONS,
    flat_limit: int | None = KMEANS_FLAT_LIMIT,
) -> np.ndarray:
    """faiss k-means (``iterations`` rounds, seeded); each row's nearest-centroid id.

    Up to ``flat_limit`` centroids (None: always) this is plain k-means, whose cost grows with
    N x k. Above it, two-level k-means (faiss's recipe for many centroids): k-means into about
    sqrt(k) coarse clusters, then k-means inside each with its share of the k centroids; rows
    then go to their nearest centroid among all k.
    """
    data = np.ascontiguousarray(z, dtype=np.float32)
    with _one_thread():
        if flat_limit is None or k <= flat_limit:
            centroids = _faiss_kmeans(data, k, seed, iterations)
        else:
            centroids = _two_level(data, k, seed, iterations)
        return _nearest(data, centroids)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run faiss on one OpenMP thread while inside this block.

    Per-class k-means is many small calls, and on shared cores a descheduled OpenMP thread
    stalls every barrier (measured here: 1.2 s single-threaded, 1.1-9 s with two threads, for
    the same 100,000-sample division).
    """
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def lsh(z: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Random-hyperplane LSH buckets: a fine signature with at most ``k`` non-empty buckets.

    Each hyperplane has a random Gaussian normal and passes through a randomly drawn sample, so
    it cuts the data. Hyperplanes are added one bit at a time while the number of distinct
    signatures stays at most ``k`` (about N / ratio buckets); a hyperplane that would exceed it
    is redrawn, up to 8 times, before the signature is final. Returns each row's signature.
    """
    rng = np.random.default_rng(seed)
    data = np.asarray(z, dtype=np.float64)
    keys = np.zeros(len(data), dtype=np.int64)
    for _ in range(_MAX_BITS):
        for _try in range(_LSH_TRIES):
            proj = data @ rng.standard_normal(data.shape[1])
            finer = keys * 2 + (proj > proj[rng.integers(len(data))])
            if len(np.unique(finer)) <= k:
                keys = finer
                break
        else:
            break
    return keys


def gmm(z: np.ndarray, k: int, seed: int) -> np.ndarray:
    """scikit-learn Gaussian mixture (diagonal covariances, k-means init); each row's component."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    model = GaussianMixture(
        n_components=k, covariance_type="diag", reg_covar=1e-4, random_state=seed
    )
    with warnings.catch_warnings():  # duplicate points: fewer distinct clusters is fine here
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        ids = model.fit_predict(np.asarray(z, dtype=np.float64))
    return np.asarray(ids, dtype=np.int64)


def load_library(method: str) -> None:
    """Import the library ``method`` divides with (faiss, or scikit-learn for ``gmm``), so
    that a timed division measures the division and not the library's loading (faiss: about
    35 ms here, a process's start-up like torch's)."""
    if method == "gmm":
        import sklearn.mixture  # noqa: F401
    elif method in DIVIDERS:
        import faiss  # noqa: F401


def _dividers(iterations: int, flat_limit: int | None) -> dict[str, Divider]:
    return {
        "kmeans": lambda z, k, s: kmeans(z, k, s, iterations, flat_limit),
        "lsh": lsh,
        "gmm": gmm,
    }


def divide(
    z: np.ndarray,
    labels: np.ndarray,
    method: str,
    ratio: int,
    seed: int,
    iterations: int = KMEANS_ITERATIONS,
    flat_limit: int | None = KMEANS_FLAT_LIMIT,
) -> np.ndarray:
    """Each sample's subset id: subsets never mix classes; ids run 0..M-1 with no empty subset.

    ``z`` holds the reduced features (N, d'), ``labels`` the classes (N,). Within class c, the
    divider splits its samples into about ``n_c / ratio`` groups (see :func:`subsets_per_class`);
    empty groups are dropped and ids renumbered, class by class in ascending class order.
    """
    dividers = _dividers(iterations, flat_limit)
    if method not in dividers:
        raise ValueError(f"unknown divider {method!r}; use one of {', '.join(DIVIDERS)}")
    if ratio < 1:
        raise ValueError(f"ratio must be at least 1 (got {ratio})")
    labels = np.asarray(labels, dtype=np.int64)
    classes, counts = np.unique(labels, return_counts=True)
    shares = subsets_per_class(counts, ratio)
    out = np.empty(len(labels), dtype=np.int64)
    next_id = 0
    for c, n_c, k in zip(classes, counts, shares, strict=True):
        members = np.flatnonzero(labels == c)
        if k <= 1:
            local = np.zeros(n_c, dtype=np.int64)
        elif k >= n_c:
            local = np.arange(n_c, dtype=np.int64)
        else:
            local = dividers[method](z[members], int(k), derive_seed(seed, _SALT + int(c)))
        _, dense = np.unique(local, return_inverse=True)
        out[members] = dense.reshape(-1) + next_id
        next_id += int(dense.max()) + 1
    return out
