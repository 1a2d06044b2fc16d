"""Load the dataset a recipe names into normalised train and test arrays, deterministic in seed."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import numpy as np

from edgetrain.data import cifar, idx
from edgetrain.data.dataset import Dataset, derive_seed
from edgetrain.data.split_cache import cached_split
from edgetrain.errors import DataError
from edgetrain.recipe import DataSection

log = logging.getLogger(__name__)

Split = tuple[np.ndarray, np.ndarray]

_IDX_SUBDIRS: dict[str, tuple[str, ...]] = {
    "mnist": ("MNIST/raw", "MNIST", "raw"),
    "fashion-mnist": ("FashionMNIST/raw", "FashionMNIST", "raw"),
}
_CLASSES = {"digits": 10, "mnist": 10, "fashion-mnist": 10, "cifar10": 10}
_SALT_CUT, _SALT_SUBSAMPLE, _SALT_SYNTHETIC = 0x5E1, 0x5AB, 0x5EED
_SYNTHETIC_NOISE = 1.5


def _root(cfg: DataSection) -> Path:
    if not cfg.root:
        raise DataError(
            f"dataset '{cfg.dataset}' needs a directory", "set [data] root (or --root DIR)"
        )
    root = Path(os.path.expanduser(cfg.root))
    if not root.is_dir():
        raise DataError(
            f"dataset '{cfg.dataset}': directory '{cfg.root}' not found",
            "set [data] root to the dataset's directory",
        )
    return root


def _load_idx(cfg: DataSection) -> tuple[Split | None, Split | None]:
    root = _root(cfg)
    subdirs = _IDX_SUBDIRS[cfg.dataset]
    found = idx.locate(root, subdirs)
    if found is None:
        names = ", ".join(s for pair in idx.IDX_STEMS.values() for s in pair)
        where = ", ".join(f"'{root / s}'" for s in subdirs)
        raise DataError(
            f"no {cfg.dataset} IDX files in '{root}' (looked for {names}, plain or .gz, "
            f"there and in {where})",
            "point [data] root at the directory holding them",
        )
    directory, files = found
    splits: dict[str, Split | None] = {}
    for split, (images, labels) in idx.IDX_STEMS.items():
        pi, pl = files[images], files[labels]
        if pi is not None and pl is not None:
            splits[split] = idx.load_pair(pi, pl)
        elif pi is not None or pl is not None:
            have, lack = (pi.name, labels) if pi is not None else (pl.name if pl else "", images)
            raise DataError(
                f"'{directory}' has '{have}' but not its partner '{lack}' (plain or .gz)",
                "add the missing file, or remove the lone one",
            )
        else:
            splits[split] = None
    return splits["train"], splits["test"]


def _load_cifar(cfg: DataSection) -> tuple[Split | None, Split | None]:
    root = _root(cfg)
    found = cifar.find_batches(root)
    if found is None:
        raise DataError(
            f"no CIFAR-10 batches in '{root}' (looked for data_batch_1..5 and test_batch, "
            f"there and in '{root / cifar.SUBDIR}')",
            "point [data] root at the extracted cifar-10-python directory",
        )
    _, train_files, test_file = found
    train = None
    if train_files:
        parts = [cifar.read_batch(p) for p in train_files]
        train = (np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts]))
    test = cifar.read_batch(test_file) if test_file is not None else None
    return train, test


def _digits() -> Split:
    """scikit-learn's digits (1797 8x8 images, values 0-16), read from the CSV file the
    package ships: importing ``sklearn.datasets`` costs a second or more of start-up (scipy),
    in the launcher and in every worker. Falls back to ``load_digits`` where the file is not
    where scikit-learn keeps it."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, "rt") as fh:
                table = np.loadtxt(fh, delimiter=",", dtype=np.float64)
            return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits

    d = load_digits()
    return np.asarray(d.images), np.asarray(d.target, dtype=np.int64)


def _synthetic(cfg: DataSection, seed: int) -> Split:
    """Class-conditional Gaussians: one fixed random prototype per class plus noise."""
    shape = (1,) * (3 - len(cfg.shape)) + tuple(cfg.shape)
    rng = np.random.default_rng(derive_seed(seed, _SALT_SYNTHETIC))
    try:
        protos = rng.standard_normal((cfg.classes, *shape), dtype=np.float32)
        y = rng.permutation(np.arange(cfg.count) % cfg.classes).astype(np.int64)
        x = rng.standard_normal((cfg.count, *shape), dtype=np.float32)
    except MemoryError:
        need = (cfg.classes + cfg.count) * math.prod(shape) * 4
        raise DataError(
            f"the synthetic dataset ({cfg.count} samples of shape {list(shape)}) needs "
            f"{need / 2**30:,.1f} GiB, more memory than this machine can give",
            "lower [data] count or shape",
        ) from None
    x *= np.float32(_SYNTHETIC_NOISE)
    x += protos[y]
    return x, y


def _stratify(y: np.ndarray, n_a: int, n_b: int) -> np.ndarray | None:
    """``y`` when a stratified split into sizes ``n_a``/``n_b`` is possible, else None."""
    counts = np.bincount(y)
    present = counts[counts > 0]
    if len(present) and present.min() >= 2 and min(n_a, n_b) >= len(present):
        return y
    return None


def _cut(x: np.ndarray, y: np.ndarray, fraction: float, seed: int) -> tuple[Split, Split]:
    """Hold out ``fraction`` of the samples as the test split (stratified where possible)."""
    n = len(y)
    n_test = math.ceil(fraction * n)
    if n_test < 1 or n - n_test < 1:
        raise DataError(
            f"cannot hold out test_split = {fraction} of {n} samples",
            "choose a test_split that leaves both splits non-empty",
        )
    tr, te = cached_split(
        n, n - n_test, derive_seed(seed, _SALT_CUT), _stratify(y, n - n_test, n_test)
    )
    return (x[tr], y[tr]), (x[te], y[te])


def _subsample(x: np.ndarray, y: np.ndarray, n: int, seed: int) -> Split:
    """Keep ``n`` training samples (stratified where possible), in their original order."""
    if n >= len(y):
        return x, y
    keep, _ = cached_split(
        len(y), n, derive_seed(seed, _SALT_SUBSAMPLE), _stratify(y, n, len(y) - n)
    )
    return x[keep], y[keep]


def _to_images(x: np.ndarray, scale: float) -> np.ndarray:
    """A fresh float32 ``(N, C, H, W)`` array, divided by ``scale``."""
    out = np.array(x, dtype=np.float32, copy=True)
    if scale != 1.0:
        np.divide(out, np.float32(scale), out=out)
    if out.ndim == 3:
        out = out[:, None, :, :]
    return out


def _normalise(train: np.ndarray, test: np.ndarray, chunk: int = 4096) -> None:
    """Standardise each channel in place with the training split's mean and std.

    Statistics accumulate in float64 over chunks, so large sets need no float64 copy.
    """
    n = len(train)
    for c in range(train.shape[1]):
        total = sum(
            float(train[i : i + chunk, c].sum(dtype=np.float64)) for i in range(0, n, chunk)
        )
        count = n * train[0, c].size
        mean = total / count
        sq = sum(
            float(np.square(train[i : i + chunk, c].astype(np.float64) - mean).sum())
            for i in range(0, n, chunk)
        )
        std = math.sqrt(sq / count)
        std = std if std > 1e-8 else 1.0
        for arr in (train, test):
            arr[:, c] -= np.float32(mean)
            arr[:, c] /= np.float32(std)


def _raw_splits(cfg: DataSection, seed: int) -> tuple[Split | None, Split | None, float]:
    """Train and test splits as stored (either may be missing) and the pixel scale."""
    if cfg.dataset == "digits":
        return _digits(), None, 16.0
    if cfg.dataset == "synthetic":
        return _synthetic(cfg, seed), None, 1.0
    if cfg.dataset == "cifar10":
        return (*_load_cifar(cfg), 255.0)
    return (*_load_idx(cfg), 255.0)


def load_dataset(cfg: DataSection, seed: int) -> Dataset:
    """Load ``cfg.dataset`` with its train and test splits, normalised, deterministic in seed.

    When the source holds only one split (e.g. just MNIST's t10k files), the test split is cut
    from it with ``cfg.test_split``. ``cfg.max_samples`` then thins the training split.
    """
    train, test, scale = _raw_splits(cfg, seed)
    if train is None or test is None:
        only = train if train is not None else test
        assert only is not None
        log.info(
            "%s: one split found; holding out %.0f%% as test", cfg.dataset, 100 * cfg.test_split
        )
        train, test = _cut(only[0], only[1], cfg.test_split, seed)
    classes = cfg.classes if cfg.dataset == "synthetic" else _CLASSES[cfg.dataset]
    for ys in (train[1], test[1]):
        if len(ys) and (ys.min() < 0 or ys.max() >= classes):
            raise DataError(
                f"dataset '{cfg.dataset}' has labels {int(ys.min())}..{int(ys.max())}, "
                f"expected 0..{classes - 1}",
                "check that root holds the right dataset",
            )
    x_train, y_train = train
    if cfg.max_samples is not None:
        x_train, y_train = _subsample(x_train, y_train, cfg.max_samples, seed)
    x_tr, x_te = _to_images(x_train, scale), _to_images(test[0], scale)
    _normalise(x_tr, x_te)
    return Dataset(
        name=cfg.dataset,
        x_train=x_tr,
        y_train=np.asarray(y_train, dtype=np.int64),
        x_test=x_te,
        y_test=np.asarray(test[1], dtype=np.int64),
        classes=classes,
    )
