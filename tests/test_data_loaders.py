"""Dataset loaders: real MNIST IDX files, IDX validation, CIFAR batches, digits, synthetic."""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgetrain.data import Dataset, load_dataset
from edgetrain.data.cifar import read_batch
from edgetrain.data.idx import read_idx
from edgetrain.errors import DataError
from edgetrain.recipe import DataSection

IMAGES, LABELS = "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"


@pytest.fixture(scope="module")
def mnist_raw(mnist_test_dir: Path) -> dict[str, bytes]:
    """The un-gzipped bytes of the two real t10k files."""
    return {n: gzip.decompress((mnist_test_dir / f"{n}.gz").read_bytes()) for n in (IMAGES, LABELS)}


def _mnist(root: Path | str, seed: int = 0, **kw: object) -> Dataset:
    return load_dataset(DataSection(dataset="mnist", root=str(root), **kw), seed=seed)


def _assert_same(a: Dataset, b: Dataset) -> None:
    for field in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


# --------------------------------------------------------------------------- real MNIST


def test_real_mnist_test_set_is_split_by_test_split(mnist_test_dir: Path) -> None:
    ds = _mnist(mnist_test_dir, test_split=0.25)
    assert ds.name == "mnist" and ds.classes == 10 and ds.input_shape == (1, 28, 28)
    assert len(ds.y_train) == 7500 and len(ds.y_test) == 2500
    assert ds.x_train.shape == (7500, 1, 28, 28) and ds.x_test.shape == (2500, 1, 28, 28)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    labels = np.concatenate([ds.y_train, ds.y_test])
    assert labels.min() == 0 and labels.max() == 9
    # the published label counts of the MNIST test set
    expected = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert np.bincount(labels).tolist() == expected
    # normalised with the training split's statistics
    assert abs(float(ds.x_train.mean())) < 1e-4 and abs(float(ds.x_train.std()) - 1) < 1e-3
    assert abs(float(ds.x_test.mean())) < 0.05
    # stratified: each class keeps its share in the held-out split
    share = np.bincount(ds.y_test, minlength=10) / np.array(expected)
    assert np.all(np.abs(share - 0.25) < 0.01)


def test_real_mnist_split_is_deterministic_in_seed(mnist_test_dir: Path) -> None:
    a, b, c = _mnist(mnist_test_dir, 7), _mnist(mnist_test_dir, 7), _mnist(mnist_test_dir, 8)
    _assert_same(a, b)
    assert len(a.y_test) == len(c.y_test) == 2000
    assert not np.array_equal(a.y_test, c.y_test) or not np.array_equal(a.x_test, c.x_test)


def test_real_mnist_max_samples_subsamples_training_split(mnist_test_dir: Path) -> None:
    ds = _mnist(mnist_test_dir, max_samples=500)
    assert len(ds.y_train) == 500 and len(ds.y_test) == 2000
    assert np.bincount(ds.y_train, minlength=10).min() >= 40  # stratified, ~50 per class
    assert abs(float(ds.x_train.mean())) < 1e-4  # statistics of the subsample


def test_mnist_torchvision_layout(mnist_test_dir: Path, tmp_path: Path) -> None:
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in (IMAGES, LABELS):
        (raw / f"{name}.gz").symlink_to(mnist_test_dir / f"{name}.gz")
    _assert_same(_mnist(tmp_path), _mnist(mnist_test_dir))


def test_mnist_plain_files_and_gzip_by_magic(
    mnist_test_dir: Path, mnist_raw: dict[str, bytes], tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for name, data in mnist_raw.items():
        (plain / name).write_bytes(data)
    reference = _mnist(mnist_test_dir)
    _assert_same(_mnist(plain), reference)
    # gzip data under a plain name is recognised by its magic bytes
    named = tmp_path / "named"
    named.mkdir()
    for name in (IMAGES, LABELS):
        shutil.copy(mnist_test_dir / f"{name}.gz", named / name)
    _assert_same(_mnist(named), reference)


def test_mnist_both_splits_are_used_as_train_and_test(
    mnist_raw: dict[str, bytes], tmp_path: Path
) -> None:
    images, labels = mnist_raw[IMAGES], mnist_raw[LABELS]
    # a "train" pair of the first 3000 images, the full t10k pair as test
    head = images[:4] + (3000).to_bytes(4, "big") + images[8 : 16 + 3000 * 784]
    (tmp_path / "train-images-idx3-ubyte").write_bytes(head)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(
        labels[:4] + (3000).to_bytes(4, "big") + labels[8 : 8 + 3000]
    )
    (tmp_path / IMAGES).write_bytes(images)
    (tmp_path / LABELS).write_bytes(labels)
    ds = _mnist(tmp_path, test_split=0.5)  # test_split is not used when both exist
    assert len(ds.y_train) == 3000 and len(ds.y_test) == 10_000
    np.testing.assert_array_equal(ds.y_train, np.frombuffer(labels[8 : 8 + 3000], np.uint8))


def test_fashion_mnist_uses_its_own_torchvision_folder(
    mnist_test_dir: Path, tmp_path: Path
) -> None:
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for name in (IMAGES, LABELS):
        (raw / f"{name}.gz").symlink_to(mnist_test_dir / f"{name}.gz")
    ds = load_dataset(DataSection(dataset="fashion-mnist", root=str(tmp_path)), seed=0)
    assert ds.name == "fashion-mnist" and len(ds.y_train) == 8000
    with pytest.raises(DataError, match="no mnist IDX files"):
        _mnist(tmp_path)


# --------------------------------------------------------------------------- IDX errors


def _write_pair(d: Path, images: bytes, labels: bytes) -> None:
    d.mkdir(exist_ok=True)
    (d / IMAGES).write_bytes(images)
    (d / LABELS).write_bytes(labels)


def test_truncated_idx_file_names_the_file(mnist_raw: dict[str, bytes], tmp_path: Path) -> None:
    _write_pair(tmp_path, mnist_raw[IMAGES][:-100], mnist_raw[LABELS])
    with pytest.raises(DataError, match=rf"{IMAGES}' is truncated"):
        _mnist(tmp_path)
    _write_pair(tmp_path, mnist_raw[IMAGES][:10], mnist_raw[LABELS])  # inside the header
    with pytest.raises(DataError, match=rf"{IMAGES}' is truncated"):
        _mnist(tmp_path)


def test_truncated_gzip_names_the_file(mnist_test_dir: Path, tmp_path: Path) -> None:
    gz = (mnist_test_dir / f"{IMAGES}.gz").read_bytes()
    (tmp_path / f"{IMAGES}.gz").write_bytes(gz[: len(gz) // 2])
    shutil.copy(mnist_test_dir / f"{LABELS}.gz", tmp_path)
    with pytest.raises(DataError, match=rf"cannot read IDX file '.*{IMAGES}\.gz'"):
        _mnist(tmp_path)


def test_wrong_magic_and_wrong_file_name_the_file(
    mnist_raw: dict[str, bytes], tmp_path: Path
) -> None:
    images, labels = mnist_raw[IMAGES], mnist_raw[LABELS]
    _write_pair(tmp_path, b"\x12\x34" + images[2:], labels)
    with pytest.raises(DataError, match=rf"{IMAGES}' is not an IDX file \(bad magic"):
        _mnist(tmp_path)
    _write_pair(tmp_path, labels, labels)  # labels where images belong: 1-d, not 3-d
    with pytest.raises(DataError, match=rf"{IMAGES}' holds 1-dimensional data, expected 3"):
        _mnist(tmp_path)
    _write_pair(tmp_path, images, images[:4] + b"\x00\x00\x00\x05" + images[8:])
    with pytest.raises(DataError, match=rf"{LABELS}' holds 3-dimensional"):
        _mnist(tmp_path)
    _write_pair(tmp_path, images + b"\x00", labels)
    with pytest.raises(DataError, match=rf"{IMAGES}' is corrupt"):
        _mnist(tmp_path)


def test_image_and_label_counts_must_match(mnist_raw: dict[str, bytes], tmp_path: Path) -> None:
    labels = mnist_raw[LABELS]
    short = labels[:4] + (9999).to_bytes(4, "big") + labels[8:-1]
    _write_pair(tmp_path, mnist_raw[IMAGES], short)
    with pytest.raises(DataError, match=r"9999 labels but .* 10000 images"):
        _mnist(tmp_path)


def _idx(array: np.ndarray) -> bytes:
    """An IDX file of uint8 data, written here (no real data needed)."""
    dims = b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return bytes([0, 0, 0x08, array.ndim]) + dims + array.astype(np.uint8).tobytes()


def test_idx_loading_and_errors_without_real_data(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 256, (50, 6, 5)), np.arange(50) % 10
    _write_pair(tmp_path, _idx(images), gzip.compress(_idx(labels)))  # labels gzipped, no .gz
    ds = _mnist(tmp_path, test_split=0.2)
    assert ds.input_shape == (1, 6, 5) and len(ds.y_train) == 40 and len(ds.y_test) == 10
    assert sorted(ds.y_test.tolist()) == list(range(10))  # stratified: one of each class
    _write_pair(tmp_path, _idx(images)[:-1], _idx(labels))
    with pytest.raises(DataError, match=rf"{IMAGES}' is truncated: 1499 data bytes"):
        _mnist(tmp_path)
    _write_pair(tmp_path, b"\x08\x03" + _idx(images)[2:], _idx(labels))
    with pytest.raises(DataError, match=rf"{IMAGES}' is not an IDX file"):
        _mnist(tmp_path)
    _write_pair(tmp_path, _idx(images), _idx(labels + 5))
    with pytest.raises(DataError, match=r"labels 5\.\.14, expected 0\.\.9"):
        _mnist(tmp_path)


def test_read_idx_checks_dtype_code(tmp_path: Path) -> None:
    p = tmp_path / "floats"
    p.write_bytes(b"\x00\x00\x0d\x01" + (2).to_bytes(4, "big") + np.ones(2, ">f4").tobytes())
    np.testing.assert_array_equal(read_idx(p), [1.0, 1.0])
    with pytest.raises(DataError, match="holds IDX type 0x0d, expected 0x08"):
        read_idx(p, dtype_code=0x08)


def test_missing_files_list_what_was_looked_for(tmp_path: Path) -> None:
    with pytest.raises(DataError) as exc:
        _mnist(tmp_path)
    msg = str(exc.value)
    for name in (IMAGES, LABELS, "train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        assert name in msg
    assert str(tmp_path) in msg and "MNIST/raw" in msg and "point [data] root" in msg
    with pytest.raises(DataError, match="directory '.*nowhere' not found"):
        _mnist(tmp_path / "nowhere")


def test_lone_file_of_a_pair_is_an_error(mnist_test_dir: Path, tmp_path: Path) -> None:
    shutil.copy(mnist_test_dir / f"{IMAGES}.gz", tmp_path)
    with pytest.raises(DataError, match=rf"has '{IMAGES}.gz' but not its partner '{LABELS}'"):
        _mnist(tmp_path)


# --------------------------------------------------------------------------- CIFAR-10


def _cifar_batch(path: Path, n: int, seed: int, protocol: int = 2) -> dict[bytes, object]:
    rng = np.random.default_rng(seed)
    batch = {
        b"batch_label": b"training batch",
        b"labels": [int(v) for v in rng.integers(0, 10, size=n)],
        b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
        b"filenames": [b"img_%d.png" % i for i in range(n)],
    }
    path.write_bytes(pickle.dumps(batch, protocol=protocol))
    return batch


def test_cifar_batches_in_standard_folder(tmp_path: Path) -> None:
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    batches = [_cifar_batch(d / f"data_batch_{i}", 30, i) for i in range(1, 6)]
    _cifar_batch(d / "test_batch", 40, 99)
    ds = load_dataset(DataSection(dataset="cifar10", root=str(tmp_path)), seed=0)
    assert ds.name == "cifar10" and ds.input_shape == (3, 32, 32) and ds.classes == 10
    assert ds.x_train.shape == (150, 3, 32, 32) and len(ds.y_test) == 40
    np.testing.assert_array_equal(ds.y_train, np.concatenate([b[b"labels"] for b in batches]))
    # layout: the 3072 bytes are 1024 red, 1024 green, 1024 blue values, row-major
    raw = np.concatenate([b[b"data"] for b in batches]).reshape(-1, 3, 32, 32) / 255.0
    for c in range(3):
        mean, std = raw[:, c].mean(), raw[:, c].std()
        np.testing.assert_allclose(ds.x_train[:, c], (raw[:, c] - mean) / std, atol=1e-4)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar_flat_with_test_batch_only(tmp_path: Path, protocol: int) -> None:
    _cifar_batch(tmp_path / "test_batch", 100, 1, protocol)
    ds = load_dataset(DataSection(dataset="cifar10", root=str(tmp_path), test_split=0.3), seed=0)
    assert len(ds.y_train) == 70 and len(ds.y_test) == 30


def test_cifar_str_keys_are_accepted(tmp_path: Path) -> None:
    data = np.zeros((2, 3072), np.uint8)
    (tmp_path / "b").write_bytes(pickle.dumps({"data": data, "labels": [3, 4]}, protocol=2))
    x, y = read_batch(tmp_path / "b")
    assert x.shape == (2, 3, 32, 32) and y.tolist() == [3, 4]


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_cifar_pickle_with_code_is_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = {b"data": _RunsCode(marker), b"labels": [1]}
    (tmp_path / "test_batch").write_bytes(pickle.dumps(payload, protocol=2))
    with pytest.raises(DataError, match=r"test_batch' is not a CIFAR batch: forbidden global"):
        load_dataset(DataSection(dataset="cifar10", root=str(tmp_path)), seed=0)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"not a pickle", "is not a CIFAR batch"),
        (pickle.dumps([1, 2], protocol=2), r"holds list"),
        (pickle.dumps({b"labels": [1]}, protocol=2), "no 'data' array"),
        (
            pickle.dumps({b"data": np.zeros((2, 10), np.uint8), b"labels": [1, 2]}, protocol=2),
            "expected N x 3072",
        ),
        (
            pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, protocol=2),
            "1 labels for 2 images",
        ),
        (
            pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}, protocol=2),
            r"labels outside 0\.\.9",
        ),
    ],
)
def test_bad_cifar_batches_are_data_errors(tmp_path: Path, content: bytes, match: str) -> None:
    (tmp_path / "test_batch").write_bytes(content)
    with pytest.raises(DataError, match=match):
        load_dataset(DataSection(dataset="cifar10", root=str(tmp_path)), seed=0)


def test_cifar_missing_batches(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no CIFAR-10 batches .*data_batch_1\.\.5 and test_batch"):
        load_dataset(DataSection(dataset="cifar10", root=str(tmp_path)), seed=0)


# --------------------------------------------------------------------------- digits, synthetic


def test_digits_shapes_normalisation_and_stratification() -> None:
    ds = load_dataset(DataSection(), seed=0)
    assert ds.name == "digits" and ds.input_shape == (1, 8, 8) and ds.classes == 10
    assert len(ds.y_train) == 1437 and len(ds.y_test) == 360  # 20 % held out
    assert ds.x_train.dtype == np.float32 and ds.y_test.dtype == np.int64
    assert abs(float(ds.x_train.mean())) < 1e-5 and abs(float(ds.x_train.std()) - 1) < 1e-4
    full = np.bincount(np.concatenate([ds.y_train, ds.y_test]))
    np.testing.assert_allclose(np.bincount(ds.y_test) / full, 0.2, atol=0.02)
    _assert_same(ds, load_dataset(DataSection(), seed=0))
    assert not np.array_equal(ds.y_test, load_dataset(DataSection(), seed=1).y_test)


def test_digits_max_samples_and_negative_seed() -> None:
    ds = load_dataset(DataSection(max_samples=200, test_split=0.5), seed=-5)
    assert len(ds.y_train) == 200 and len(ds.y_test) == 899
    assert np.bincount(ds.y_train, minlength=10).min() >= 18  # stratified
    assert abs(float(ds.x_train.mean())) < 1e-5


@pytest.mark.parametrize(
    ("shape", "expected"), [([3, 4, 5], (3, 4, 5)), ([6, 7], (1, 6, 7)), ([12], (1, 1, 12))]
)
def test_synthetic_shapes(shape: list[int], expected: tuple[int, int, int]) -> None:
    cfg = DataSection(dataset="synthetic", shape=shape, classes=4, count=100)
    ds = load_dataset(cfg, seed=3)
    assert ds.input_shape == expected and ds.classes == 4
    assert len(ds.y_train) == 80 and len(ds.y_test) == 20
    assert set(np.unique(ds.y_train)) == set(range(4))


def test_synthetic_is_deterministic_and_learnable() -> None:
    cfg = DataSection(dataset="synthetic", shape=[1, 6, 6], classes=5, count=1000)
    ds = load_dataset(cfg, seed=1)
    _assert_same(ds, load_dataset(cfg, seed=1))
    assert not np.array_equal(ds.x_train, load_dataset(cfg, seed=2).x_train)
    # nearest class mean (from train) classifies the test split far above chance (20 %)
    xtr, xte = ds.x_train.reshape(len(ds.x_train), -1), ds.x_test.reshape(len(ds.x_test), -1)
    means = np.stack([xtr[ds.y_train == c].mean(0) for c in range(5)])
    pred = np.argmin(((xte[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert (pred == ds.y_test).mean() > 0.7


def test_test_split_that_empties_a_split_is_an_error() -> None:
    cfg = DataSection(dataset="synthetic", count=10, test_split=0.95)
    with pytest.raises(DataError, match="cannot hold out test_split"):
        load_dataset(cfg, seed=0)
