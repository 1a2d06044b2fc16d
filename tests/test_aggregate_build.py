"""Aggregated points on small literal data: exact means, one subset per sample, pure classes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgetrain.aggregate import DIVIDERS, REDUCERS, AggregateConfig, build_aggregates
from edgetrain.aggregate.aggregates import size_summary
from edgetrain.aggregate.divide import divide, subsets_per_class
from edgetrain.aggregate.points import member_means, membership, subset_labels


def _blobs(n: int = 120, classes: int = 3, shape: tuple[int, ...] = (1, 4, 4)) -> tuple:
    rng = np.random.default_rng(7)
    y = np.arange(n) % classes
    x = rng.standard_normal((n, *shape)).astype(np.float32) + y.reshape(-1, 1, 1, 1)
    return x, y.astype(np.int64)


def _check(agg, x: np.ndarray, y: np.ndarray) -> None:
    offsets, members = agg.member_offsets, agg.member_indices
    # every sample is in exactly one subset
    assert sorted(members.tolist()) == list(range(len(y)))
    assert offsets[0] == 0 and offsets[-1] == len(y) and np.all(np.diff(offsets) > 0)
    assert len(agg.points) == len(agg.labels) == len(offsets) - 1
    for m in range(len(agg.points)):
        idx = members[offsets[m] : offsets[m + 1]]
        assert set(y[idx].tolist()) == {agg.labels[m]}  # no subset mixes classes
        expect = x[idx].astype(np.float64).mean(axis=0)
        np.testing.assert_allclose(agg.points[m], expect, rtol=1e-6, atol=1e-6)


def test_membership_and_means_on_literal_data() -> None:
    x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [10.0, 0.0]], np.float32)
    ids = np.array([1, 0, 1, 2, 0])
    offsets, members = membership(ids)
    assert offsets.tolist() == [0, 2, 4, 5]
    assert members.tolist() == [1, 4, 0, 2, 3]
    points = member_means(x, offsets, members)
    assert points.tolist() == [[6.5, 2.0], [3.0, 4.0], [7.0, 8.0]]
    labels = subset_labels(np.array([5, 6, 5, 7, 6]), offsets, members)
    assert labels.tolist() == [6, 5, 7]


def test_membership_rejects_gaps() -> None:
    with pytest.raises(ValueError, match="no empty subset"):
        membership(np.array([0, 2, 2]))


def test_member_means_exact_across_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    import edgetrain.aggregate.points as points

    monkeypatch.setattr(points, "_BLOCK_ROWS", 3)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 2, 3)).astype(np.float32)
    ids = rng.integers(0, 7, size=50)
    ids = np.unique(ids, return_inverse=True)[1]
    offsets, members = membership(ids)
    got = points.member_means(x, offsets, members)
    for m in range(len(offsets) - 1):
        want = x[ids == m].astype(np.float64).mean(axis=0)
        np.testing.assert_allclose(got[m], want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("reduce", "div"), list(itertools.product(REDUCERS, DIVIDERS)))
def test_every_combination_is_a_valid_aggregation(reduce: str, div: str) -> None:
    x, y = _blobs()
    agg = build_aggregates(x, y, AggregateConfig(reduce=reduce, divide=div, ratio=5, seed=3))
    _check(agg, x, y)
    assert agg.method == f"{reduce}+{div}"
    assert set(agg.timings) == {"reduce", "divide", "aggregate"}
    assert len(agg.points) <= 24 + 3  # about N / ratio
    if div != "lsh":
        assert len(agg.points) == 24  # k-means and GMM fill their M = N / ratio subsets here


@pytest.mark.parametrize(("reduce", "div"), list(itertools.product(REDUCERS, DIVIDERS)))
def test_deterministic_under_seed(reduce: str, div: str) -> None:
    x, y = _blobs()
    cfg = AggregateConfig(reduce=reduce, divide=div, ratio=4, seed=11)
    a, b = build_aggregates(x, y, cfg), build_aggregates(x, y, cfg)
    for name in ("points", "labels", "member_offsets", "member_indices"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_seed_changes_lsh_buckets() -> None:
    x, y = _blobs(300)
    runs = [build_aggregates(x, y, AggregateConfig(divide="lsh", seed=s)) for s in (0, 1)]
    assert not np.array_equal(runs[0].member_indices, runs[1].member_indices)


def test_tiny_classes_get_one_subset() -> None:
    x = np.arange(14, dtype=np.float32).reshape(7, 1, 1, 2)
    y = np.array([0, 0, 0, 1, 1, 1, 1])
    for div in DIVIDERS:
        agg = build_aggregates(x, y, AggregateConfig(divide=div, ratio=10, dims=1))
        _check(agg, x, y)
        assert agg.labels.tolist() == [0, 1]
        np.testing.assert_allclose(agg.points[0].ravel(), [2.0, 3.0])
        np.testing.assert_allclose(agg.points[1].ravel(), [9.0, 10.0])


def test_ratio_one_keeps_every_sample() -> None:
    x, y = _blobs(30)
    agg = build_aggregates(x, y, AggregateConfig(ratio=1))
    _check(agg, x, y)
    assert len(agg.points) == 30


def test_duplicate_points_leave_no_empty_subset() -> None:
    # k-means on 40 identical points with 8 centroids: empty clusters must be dropped
    x = np.ones((40, 1, 2, 2), np.float32)
    y = np.zeros(40, np.int64)
    for div in DIVIDERS:
        agg = build_aggregates(x, y, AggregateConfig(divide=div, ratio=5, dims=2))
        _check(agg, x, y)


def test_subsets_per_class_apportions_n_over_ratio() -> None:
    k = subsets_per_class(np.array([100, 50, 7, 0, 33]), 10)
    assert k.tolist() == [10, 5, 1, 0, 3]
    assert subsets_per_class(np.array([5, 5]), 1).tolist() == [5, 5]


def test_divide_ids_are_contiguous_and_class_pure() -> None:
    rng = np.random.default_rng(1)
    z = rng.standard_normal((90, 3)).astype(np.float32)
    y = rng.integers(0, 4, size=90)
    for div in DIVIDERS:
        ids = divide(z, y, div, ratio=6, seed=2)
        assert sorted(set(ids.tolist())) == list(range(ids.max() + 1))
        for m in range(ids.max() + 1):
            assert len(set(y[ids == m].tolist())) == 1


def test_bad_config_rejected() -> None:
    with pytest.raises(ValueError, match="unknown reducer"):
        AggregateConfig(reduce="nope")
    with pytest.raises(ValueError, match="no samples"):
        build_aggregates(np.zeros((0, 2)), np.zeros(0), AggregateConfig())


def test_size_summary() -> None:
    s = size_summary(np.array([1, 2, 2, 9]))
    assert (s["min"], s["max"], s["median"], s["mean"]) == (1, 9, 2.0, 3.5)
    assert sum(b["count"] for b in s["histogram"]) == 4


def test_two_level_kmeans_is_valid_and_deterministic() -> None:
    x, y = _blobs(600, classes=2)
    cfg = AggregateConfig(divide="kmeans", ratio=5, seed=1, kmeans_flat_limit=8)
    a, b = build_aggregates(x, y, cfg), build_aggregates(x, y, cfg)
    _check(a, x, y)
    np.testing.assert_array_equal(a.member_indices, b.member_indices)
    assert 100 <= len(a.points) <= 120  # 60 centroids per class, a few may end up empty


def test_apportion() -> None:
    from edgetrain.aggregate.divide import apportion

    assert apportion(np.array([10, 20, 30]), 6).tolist() == [1, 2, 3]
    assert apportion(np.array([1, 0, 99]), 10).tolist() == [1, 0, 10]
