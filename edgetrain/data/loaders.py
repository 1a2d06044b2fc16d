"""Load a dataset named by the recipe into normalised train and test arrays."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from edgetrain.data import cifar, idx
from edgetrain.data.dataset import Dataset
from edgetrain.errors import DataError
from edgetrain.recipe import DataSection

_IDX_SUBDIRS = {
    "mnist": ("MNIST/raw", "MNIST"),
    "fashion-mnist": ("FashionMNIST/raw", "FashionMNIST"),
}
_IDX_STEMS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

Split = tuple[np.ndarray, np.ndarray]


def _root(cfg: DataSection) -> Path:
    root = Path(os.path.expanduser(cfg.root or ""))
    if not cfg.root or not root.is_dir():
        raise DataError(
            f"dataset '{cfg.dataset}': directory '{cfg.root}' not found",
            "set [data] root to the dataset's directory",
        )
    return root


def _load_idx(cfg: DataSection) -> tuple[Split | None, Split | None]:
    root = _root(cfg)
    subdirs = _IDX_SUBDIRS[cfg.dataset]
    found: dict[str, Split | None] = {}
    for split, (images, labels) in _IDX_STEMS.items():
        pi, pl = idx.find_idx(root, images, subdirs), idx.find_idx(root, labels, subdirs)
        found[split] = idx.load_idx_pair(pi, pl) if pi and pl else None
    if found["train"] is None and found["test"] is None:
        names = ", ".join(n for pair in _IDX_STEMS.values() for n in pair)
        raise DataError(
            f"no {cfg.dataset} IDX files in '{root}' (looked for {names}, plain or .gz, there "
            f"and in {', '.join(subdirs)})",
            "point [data] root at the directory holding them",
        )
    return found["train"], found["test"]


def _load_cifar(cfg: DataSection) -> tuple[Split | None, Split | None]:
    root = _root(cfg)
    train_files, test_file = cifar.find_batches(root)
    if not train_files and test_file is None:
        raise DataError(
            f"no CIFAR-10 batches in '{root}' (looked for data_batch_1..5 and test_batch, "
            "there and in cifar-10-batches-py/)",
            "point [data] root at the directory holding them",
        )
    train = None
    if train_files:
        parts = [cifar.read_batch(p) for p in train_files]
        train = (np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts]))
    return train, cifar.read_batch(test_file) if test_file else None


def _digits() -> Split:
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images / 16.0).astype(np.float32), d.target.astype(np.int64)


def _synthetic(cfg: DataSection, seed: int) -> Split:
    shape = [1, 1, 1][: 3 - len(cfg.shape)] + list(cfg.shape)
    rng = np.random.default_rng([seed, 0x5EED])
    protos = rng.standard_normal((cfg.classes, *shape)).astype(np.float32)
    y = rng.integers(0, cfg.classes, size=cfg.count).astype(np.int64)
    noise = rng.standard_normal((cfg.count, *shape)).astype(np.float32)
    return protos[y] + 1.5 * noise, y


def _split(x: np.ndarray, y: np.ndarray, fraction: float, seed: int) -> tuple[Split, Split]:
    """Cut a stratified held-out split (plain random when a class is too small)."""
    from sklearn.model_selection import train_test_split

    counts = np.bincount(y)
    stratify = y if counts[counts > 0].min() >= 2 else None
    xtr, xte, ytr, yte = train_test_split(
        x, y, test_size=fraction, random_state=seed, stratify=stratify
    )
    return (xtr, ytr), (xte, yte)


def _subsample(x: np.ndarray, y: np.ndarray, n: int, seed: int) -> Split:
    if n >= len(y):
        return x, y
    rng = np.random.default_rng([seed, 0x5AB])
    keep = np.sort(rng.choice(len(y), size=n, replace=False))
    return x[keep], y[keep]


def _as_images(x: np.ndarray) -> np.ndarray:
    """``(N, H, W)`` -> ``(N, 1, H, W)``; ``(N, D)`` -> ``(N, 1, 1, D)``."""
    if x.ndim == 2:
        return x[:, None, None, :]
    if x.ndim == 3:
        return x[:, None, :, :]
    return x


def _normalise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel standardisation with the training split's statistics."""
    mean = train.mean(axis=(0, 2, 3), keepdims=True, dtype=np.float64)
    std = train.std(axis=(0, 2, 3), keepdims=True, dtype=np.float64)
    std[std < 1e-8] = 1.0
    norm = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
    return norm(train), norm(test)


def load_dataset(cfg: DataSection, seed: int) -> Dataset:
    """Load ``cfg.dataset`` with its train and test splits, normalised, deterministic in seed."""
    train: Split | None
    test: Split | None
    if cfg.dataset == "digits":
        train, test = _digits(), None
    elif cfg.dataset == "synthetic":
        train, test = _synthetic(cfg, seed), None
    elif cfg.dataset == "cifar10":
        train, test = _load_cifar(cfg)
        train = None if train is None else (train[0] / np.float32(255), train[1])
        test = None if test is None else (test[0] / np.float32(255), test[1])
    else:
        train, test = _load_idx(cfg)
        train = None if train is None else (train[0] / np.float32(255), train[1])
        test = None if test is None else (test[0] / np.float32(255), test[1])
    if train is None or test is None:
        only = train if train is not None else test
        assert only is not None
        train, test = _split(only[0], only[1], cfg.test_split, seed)
    x_train, y_train = train
    if cfg.max_samples is not None:
        x_train, y_train = _subsample(x_train, y_train, cfg.max_samples, seed)
    x_tr = _as_images(np.asarray(x_train, dtype=np.float32))
    x_te = _as_images(np.asarray(test[0], dtype=np.float32))
    x_tr, x_te = _normalise(x_tr, x_te)
    classes = int(max(y_train.max(initial=0), test[1].max(initial=0)) + 1)
    if cfg.dataset == "synthetic":
        classes = cfg.classes
    return Dataset(
        cfg.dataset, x_tr, y_train.astype(np.int64), x_te, test[1].astype(np.int64), classes
    )
