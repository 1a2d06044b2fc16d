"""Datasets: real MNIST IDX files, CIFAR batches written here, digits, synthetic; partitions."""

from __future__ import annotations

import gzip
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgetrain.data import load_dataset, partition_indices, partition_stats
from edgetrain.errors import DataError
from edgetrain.recipe import DataSection


def test_real_mnist_test_set_loads_and_splits(test_data_dir: Path) -> None:
    root = test_data_dir / "mnist-test"
    ds = load_dataset(DataSection(dataset="mnist", root=str(root), test_split=0.2), seed=0)
    assert ds.input_shape == (1, 28, 28) and ds.classes == 10
    assert len(ds.y_train) + len(ds.y_test) == 10_000 and len(ds.y_test) == 2000
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert abs(float(ds.x_train.mean())) < 1e-3 and abs(float(ds.x_train.std()) - 1) < 1e-2
    assert set(np.unique(ds.y_test)) == set(range(10))
    again = load_dataset(DataSection(dataset="mnist", root=str(root)), seed=0)
    np.testing.assert_array_equal(again.y_test, ds.y_test)
    other = load_dataset(DataSection(dataset="mnist", root=str(root)), seed=1)
    assert not np.array_equal(other.y_test, ds.y_test)


def test_mnist_torchvision_layout_and_plain_files(test_data_dir: Path, tmp_path: Path) -> None:
    src = test_data_dir / "mnist-test"
    raw = tmp_path / "tv" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        # torchvision's layout, un-gzipped, and the train split given as the test pair renamed
        data = gzip.decompress((src / f"{name}.gz").read_bytes())
        (raw / name).write_bytes(data)
        (raw / name.replace("t10k", "train")).write_bytes(data)
    ds = load_dataset(DataSection(dataset="mnist", root=str(tmp_path / "tv")), seed=0)
    assert len(ds.y_train) == 10_000 and len(ds.y_test) == 10_000  # both splits found


def test_bad_idx_files_name_the_file(test_data_dir: Path, tmp_path: Path) -> None:
    src = test_data_dir / "mnist-test"
    shutil.copy(src / "t10k-labels-idx1-ubyte.gz", tmp_path)
    images = gzip.decompress((src / "t10k-images-idx3-ubyte.gz").read_bytes())
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(images[:-100])  # truncated
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte.*truncated"):
        load_dataset(DataSection(dataset="mnist", root=str(tmp_path)), seed=0)
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(b"\x12\x34" + images[2:])
    with pytest.raises(DataError, match="bad magic"):
        load_dataset(DataSection(dataset="mnist", root=str(tmp_path)), seed=0)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no mnist IDX files.*t10k-images-idx3-ubyte"):
        load_dataset(DataSection(dataset="mnist", root=str(empty)), seed=0)


def _cifar_batch(path: Path, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    batch = {
        b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
        b"labels": [int(v) for v in rng.integers(0, 10, size=n)],
        b"batch_label": b"test",
    }
    path.write_bytes(pickle.dumps(batch, protocol=2))


def test_cifar_batches_written_here(tmp_path: Path) -> None:
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    for i in range(1, 3):
        _cifar_batch(d / f"data_batch_{i}", 40, i)
    _cifar_batch(d / "test_batch", 30, 9)
    ds = load_dataset(DataSection(dataset="cifar10", root=str(tmp_path)), seed=0)
    assert ds.input_shape == (3, 32, 32)
    assert len(ds.y_train) == 80 and len(ds.y_test) == 30
    raw = pickle.loads((d / "data_batch_1").read_bytes())[b"data"][0].reshape(3, 32, 32)
    # per-channel normalisation is monotonic: the same pixel ordering means the same layout
    for c in range(3):
        np.testing.assert_array_equal(
            np.argsort(raw[c].reshape(-1), kind="stable"),
            np.argsort(ds.x_train[0, c].reshape(-1), kind="stable"),
        )


def test_cifar_pickle_with_code_is_refused(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    (tmp_path / "test_batch").write_bytes(pickle.dumps({b"data": Evil(), b"labels": [1]}))
    with pytest.raises(DataError, match="forbidden global"):
        load_dataset(DataSection(dataset="cifar10", root=str(tmp_path)), seed=0)
    assert not (tmp_path / "pwned").exists()


def test_digits_and_synthetic() -> None:
    ds = load_dataset(DataSection(), seed=0)
    assert ds.input_shape == (1, 8, 8) and ds.classes == 10
    assert len(ds.y_train) + len(ds.y_test) == 1797
    counts = np.bincount(ds.y_test, minlength=10) / len(ds.y_test)
    assert counts.min() > 0.08  # stratified
    syn = load_dataset(DataSection(dataset="synthetic", shape=[3, 4, 4], classes=5, count=200), 3)
    assert syn.input_shape == (3, 4, 4) and syn.classes == 5
    assert len(syn.y_train) == 160
    small = load_dataset(DataSection(max_samples=100), seed=0)
    assert len(small.y_train) == 100


@pytest.mark.parametrize("method", ["iid", "dirichlet", "fractions"])
def test_partitions_cover_every_index_once(method: str) -> None:
    labels = np.random.default_rng(0).integers(0, 10, size=1000)
    parts = partition_indices(labels, 4, method, seed=1, alpha=0.3, fractions=[0.4, 0.3, 0.2, 0.1])
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(1000))
    assert all(len(p) > 0 and np.all(np.diff(p) > 0) for p in parts)
    again = partition_indices(labels, 4, method, seed=1, alpha=0.3, fractions=[0.4, 0.3, 0.2, 0.1])
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    if method == "iid":
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    if method == "fractions":
        assert [len(p) for p in parts] == [400, 300, 200, 100]


def test_dirichlet_skew_follows_alpha() -> None:
    labels = np.repeat(np.arange(10), 300)

    def mean_tv(alpha: float) -> float:
        tvs = []
        for seed in range(5):
            parts = partition_indices(labels, 8, "dirichlet", seed=seed, alpha=alpha)
            tvs += [p["tv_distance"] for p in partition_stats(labels, parts, 10)["parts"]]
        return float(np.mean(tvs))

    skewed, balanced = mean_tv(0.1), mean_tv(100.0)
    assert skewed > 0.6  # each worker sees mostly a few classes
    assert balanced < 0.1  # close to the global class mix
    assert skewed > 5 * balanced


def test_too_many_workers_is_a_clear_error() -> None:
    with pytest.raises(DataError, match="cannot split 3 samples across 5 workers"):
        partition_indices(np.arange(3), 5, "iid", seed=0)
