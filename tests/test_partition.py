"""Partitioning across workers (iid, Dirichlet, fractions) and partition statistics."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgetrain.data import partition_indices, partition_stats
from edgetrain.errors import DataError

LABELS = np.random.default_rng(0).integers(0, 10, size=1000)
FRACTIONS = [0.4, 0.3, 0.2, 0.1]


def _parts(method: str, seed: int = 1, labels: np.ndarray = LABELS, k: int = 4, **kw: object):
    kw.setdefault("alpha", 0.3)
    kw.setdefault("fractions", FRACTIONS if k == 4 else None)
    return partition_indices(labels, k, method, seed=seed, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["iid", "dirichlet", "fractions"])
def test_every_index_exactly_once_sorted_nonempty(method: str) -> None:
    parts = _parts(method)
    assert len(parts) == 4
    joined = np.concatenate(parts)
    assert len(joined) == len(LABELS) and np.array_equal(np.sort(joined), np.arange(len(LABELS)))
    for p in parts:
        assert p.dtype == np.int64 and len(p) > 0 and np.all(np.diff(p) > 0)


@pytest.mark.parametrize("method", ["iid", "dirichlet", "fractions"])
def test_deterministic_under_seed(method: str) -> None:
    a, b, c = _parts(method, seed=5), _parts(method, seed=5), _parts(method, seed=6)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


@pytest.mark.parametrize(("n", "k"), [(1000, 4), (1001, 4), (10, 3), (7, 7), (1, 1)])
def test_iid_sizes_differ_by_at_most_one(n: int, k: int) -> None:
    parts = partition_indices(np.zeros(n, np.int64), k, "iid", seed=0)
    sizes = [len(p) for p in parts]
    assert sum(sizes) == n and max(sizes) - min(sizes) <= 1


def test_iid_keeps_the_class_mix() -> None:
    labels = np.repeat(np.arange(10), 500)
    stats = partition_stats(labels, partition_indices(labels, 5, "iid", seed=0), 10)
    assert stats["mean_tv_distance"] < 0.05


def test_fractions_sizes() -> None:
    assert [len(p) for p in _parts("fractions")] == [400, 300, 200, 100]
    parts = partition_indices(np.zeros(10, np.int64), 3, "fractions", 0, fractions=[0.5, 0.3, 0.2])
    assert [len(p) for p in parts] == [5, 3, 2]
    # a share too small to round to one sample still gets one
    tiny = partition_indices(np.zeros(100, np.int64), 2, "fractions", 0, fractions=[0.999, 0.001])
    assert [len(p) for p in tiny] == [99, 1]


def _mean_tv(alpha: float, labels: np.ndarray, seeds: range = range(5)) -> float:
    tvs = []
    for seed in seeds:
        parts = partition_indices(labels, 8, "dirichlet", seed=seed, alpha=alpha)
        assert all(len(p) > 0 for p in parts)
        tvs.append(partition_stats(labels, parts, 10)["mean_tv_distance"])
    return float(np.mean(tvs))


def test_dirichlet_skew_follows_alpha() -> None:
    labels = np.repeat(np.arange(10), 300)
    skewed, balanced = _mean_tv(0.1, labels), _mean_tv(100.0, labels)
    assert skewed > 0.5  # each worker sees mostly a few classes
    assert balanced < 0.1  # close to the global class mix
    assert skewed > 5 * balanced
    # and the entropy of each worker's labels: near the maximum only for large alpha
    for alpha, lo, hi in ((0.1, 0.0, 2.5), (100.0, 3.2, 3.33)):
        parts = partition_indices(labels, 8, "dirichlet", seed=0, alpha=alpha)
        h = [p["label_entropy_bits"] for p in partition_stats(labels, parts, 10)["parts"]]
        assert lo <= np.mean(h) <= hi


def test_dirichlet_never_leaves_a_part_empty() -> None:
    labels = np.repeat(np.arange(3), 4)  # 12 samples, 3 classes
    for seed in range(50):
        parts = partition_indices(labels, 10, "dirichlet", seed=seed, alpha=0.01)
        assert all(len(p) > 0 for p in parts)
        assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(12))
        assert all(np.all(np.diff(p) > 0) for p in parts)


def test_bad_arguments() -> None:
    with pytest.raises(DataError, match="cannot split 3 samples across 5 workers"):
        partition_indices(np.arange(3), 5, "iid", seed=0)
    with pytest.raises(ValueError, match="unknown partition method 'random'"):
        partition_indices(LABELS, 2, "random", seed=0)
    with pytest.raises(ValueError, match="num_parts"):
        partition_indices(LABELS, 0, "iid", seed=0)
    with pytest.raises(ValueError, match="one entry per part"):
        partition_indices(LABELS, 3, "fractions", seed=0, fractions=[0.5, 0.5])
    with pytest.raises(ValueError, match="sum to 1"):
        partition_indices(LABELS, 2, "fractions", seed=0, fractions=[0.5, 0.6])
    with pytest.raises(ValueError, match="alpha must be positive"):
        partition_indices(LABELS, 2, "dirichlet", seed=0, alpha=0.0)
    with pytest.raises(ValueError, match="1-d"):
        partition_indices(np.zeros((4, 2)), 2, "iid", seed=0)


def test_partition_stats_values_and_json() -> None:
    labels = np.array([0, 0, 1, 1, 2, 2])
    parts = [np.array([0, 1]), np.array([2, 3, 4, 5])]
    stats = partition_stats(labels, parts, 3)
    json.dumps(stats)  # JSON-able
    assert stats["total"] == 6 and stats["classes"] == 3
    assert stats["size_min"] == 2 and stats["size_max"] == 4
    p0, p1 = stats["parts"]
    assert p0["part"] == 0 and p0["size"] == 2 and p0["class_counts"] == [2, 0, 0]
    assert p0["class_fractions"] == [1.0, 0.0, 0.0] and p0["label_entropy_bits"] == 0.0
    assert p0["classes_present"] == 1 and p0["tv_distance"] == pytest.approx(2 / 3, abs=1e-4)
    assert p1["class_counts"] == [0, 2, 2] and p1["label_entropy_bits"] == 1.0
    assert p1["tv_distance"] == pytest.approx(1 / 3, abs=1e-4)
    assert stats["max_entropy_bits"] == pytest.approx(np.log2(3), abs=1e-4)
    with pytest.raises(ValueError, match="labels must lie in 0..2"):
        partition_stats(np.array([0, 3]), [np.array([0, 1])], 3)
