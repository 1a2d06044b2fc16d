"""Reducers: shapes, the incremental SVD against a full SVD, hashing and histograms."""

from __future__ import annotations

import numpy as np
import pytest

from edgetrain.aggregate.reduce import (
    REDUCERS,
    default_dims,
    hash_projection,
    histogram,
    isvd,
    reduce_features,
    streaming_basis,
)


def _lowrank(n: int = 500, d: int = 30, rank: int = 4) -> np.ndarray:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((n, rank)) @ (rng.standard_normal((rank, d)) * [[9], [6], [4], [2]])
    return (base + 0.01 * rng.standard_normal((n, d))).astype(np.float32)


@pytest.mark.parametrize("method", REDUCERS)
def test_shapes(method: str) -> None:
    x = np.random.default_rng(1).standard_normal((60, 1, 4, 5)).astype(np.float32)
    z = reduce_features(x, method, 3, seed=0)
    assert z.shape == (60, 3) and z.dtype == np.float32


def test_streaming_basis_matches_full_svd() -> None:
    x = _lowrank()
    _, s, vt = np.linalg.svd(x.astype(np.float64), full_matrices=False)
    for chunk in (7, 64, 1000):
        basis = streaming_basis(x, 4, chunk)
        # same subspace: each streamed vector lies in the span of the top four
        np.testing.assert_allclose(np.linalg.norm(basis @ vt[:4].T, axis=1), 1.0, atol=1e-4)
    scores = isvd(x, 4, chunk=50)
    np.testing.assert_allclose(np.linalg.norm(scores, axis=0), s[:4], rtol=1e-3)


def test_isvd_reads_a_memmap(tmp_path) -> None:
    x = _lowrank()
    mm = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=x.shape)
    mm[:] = x
    np.testing.assert_allclose(isvd(mm, 3, 64), isvd(x, 3, 64))


def test_default_dims() -> None:
    assert default_dims("svd", 784, 10) == 10
    assert default_dims("isvd", 784, 10) == 3  # log2(0.1 * 784 / 10) = 2.97
    assert default_dims("isvd", 64, 10) == 2


def test_hash_projection_is_signed_one_hot() -> None:
    p = hash_projection(50, 5, seed=3)
    assert np.all(np.count_nonzero(p, axis=1) == 1)
    assert set(np.unique(p[p != 0]).tolist()) == {-1.0, 1.0}
    np.testing.assert_array_equal(p, hash_projection(50, 5, seed=3))


def test_histogram_counts_fractions() -> None:
    x = np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 0.5, 0.5, 1.0]], np.float32)
    h = histogram(x, 2)
    np.testing.assert_allclose(h, [[0.5, 0.5], [0.25, 0.75]])


def test_svd_sample_keeps_each_samples_top_singular_values() -> None:
    from edgetrain.aggregate.reduce import svd_sample

    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 1, 6, 4)).astype(np.float32)
    z = reduce_features(x, "svd-sample", 3, seed=0)
    want = np.linalg.svd(x[:, 0].astype(np.float64), compute_uv=False)[:, :3]
    np.testing.assert_allclose(z, want, rtol=1e-5)
    # a literal: diag(3, 1, 2) has singular values 3, 2, 1; d' above min(H, W) keeps them all
    diag = np.diag([3.0, 1.0, 2.0]).astype(np.float32)[None, None]
    assert svd_sample(diag, 10).tolist() == [[3.0, 2.0, 1.0]]
    # channels: each channel's top ceil(d' / C), channel by channel; flat squares as matrices
    two = np.stack([diag[0, 0], 2 * diag[0, 0]])[None]
    assert svd_sample(two, 3).tolist() == [[3.0, 2.0, 6.0, 4.0]]
    assert svd_sample(diag.reshape(1, 9), 2).tolist() == [[3.0, 2.0]]
    assert default_dims("svd-sample", 784, 10) == 10
