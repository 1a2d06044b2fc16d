"""CIFAR-10 python batches, read with a restricted unpickler that only rebuilds numpy arrays."""

from __future__ import annotations

import codecs
import importlib
import io
import pickle
import pickletools
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.errors import DataError

#: Globals a pickled numpy array needs, as (submodule of numpy.core / numpy._core, name).
_NUMPY_CORE = {
    ("multiarray", "_reconstruct"),
    ("multiarray", "scalar"),
    ("numeric", "_frombuffer"),
}
_BUILTINS = {"dict": dict, "list": list}
_REPLACE = "replace it with an intact copy of the CIFAR-10 python version"

#: A CIFAR-10 batch holds 10000 images of 3072 bytes (about 31 MB); larger is not a batch.
_MAX_BATCH_BYTES = 64 * 2**20

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
SUBDIR = "cifar-10-batches-py"


def _numpy_core(submodule: str, name: str) -> Any:
    """``numpy._core.<sub>.<name>`` (numpy 2) or ``numpy.core.<sub>.<name>`` (numpy 1)."""
    for package in ("numpy._core", "numpy.core"):
        try:
            return getattr(importlib.import_module(f"{package}.{submodule}"), name)
        except (ImportError, AttributeError):
            continue
    raise pickle.UnpicklingError(f"numpy has no {submodule}.{name}")


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that resolves only numpy array/dtype rebuilders and dict/list.

    Any other global (``os.system``, ``builtins.eval``, ...) raises ``UnpicklingError`` before
    it can be called, so a crafted file cannot run code.
    """

    def find_class(self, module: str, name: str) -> Any:
        if module == "numpy" and name in ("ndarray", "dtype"):
            return getattr(np, name)
        if module in ("builtins", "__builtin__") and name in _BUILTINS:
            return _BUILTINS[name]
        if (module, name) == ("_codecs", "encode"):  # how protocol 2 spells bytes in Python 3
            return codecs.encode
        for prefix in ("numpy.core.", "numpy._core."):
            sub = module.removeprefix(prefix)
            if module.startswith(prefix) and (sub, name) in _NUMPY_CORE:
                return _numpy_core(sub, name)
        raise pickle.UnpicklingError(f"forbidden global {module}.{name}")


def _get(obj: dict[Any, Any], key: str) -> Any:
    return obj[key.encode()] if key.encode() in obj else obj.get(key)


def _damage(blob: bytes) -> str | None:
    """Why ``blob`` is not a well-formed pickle, found by walking its opcodes without running
    them (None: well formed). A damaged length field can claim gigabytes; the unpickler
    would try to allocate them (MemoryError, and CPython prints a stray ``SystemError`` line
    about exported buffers), the walk just finds the data shorter than claimed."""
    try:
        for _ in pickletools.genops(blob):
            pass
    except Exception as exc:  # noqa: BLE001 - every way a walk fails says the file is damaged
        return str(exc) or type(exc).__name__
    return None


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch file: ``(N, 3, 32, 32)`` uint8 images and int64 labels."""
    try:
        size = path.stat().st_size
        if size > _MAX_BATCH_BYTES:
            raise DataError(
                f"'{path}' is not a CIFAR batch: {size:,} bytes, a batch is about 31 MB",
                _REPLACE,
            )
        blob = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read CIFAR batch '{path}': {exc}", _REPLACE) from None
    why = _damage(blob)
    if why is not None:
        raise DataError(f"'{path}' is not a CIFAR batch: damaged pickle ({why})", _REPLACE)
    try:
        obj = SafeUnpickler(io.BytesIO(blob), encoding="bytes").load()
    except Exception as exc:  # noqa: BLE001 - any failure of a corrupt pickle is a data error
        reason = str(exc) or type(exc).__name__
        raise DataError(f"'{path}' is not a CIFAR batch: {reason}", _REPLACE) from None
    if not isinstance(obj, dict):
        raise DataError(f"'{path}' is not a CIFAR batch (holds {type(obj).__name__})", _REPLACE)
    data, labels = _get(obj, "data"), _get(obj, "labels")
    if not isinstance(data, np.ndarray) or not isinstance(labels, (list, np.ndarray)):
        raise DataError(f"'{path}' is not a CIFAR batch (no 'data' array or 'labels')", _REPLACE)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DataError(
            f"'{path}' holds data of shape {data.shape} and type {data.dtype}, "
            "expected N x 3072 uint8",
            _REPLACE,
        )
    try:
        y = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"'{path}' has labels that are not integers", _REPLACE) from None
    if y.shape != (len(data),):
        raise DataError(f"'{path}' has {y.size} labels for {len(data)} images", _REPLACE)
    if len(y) and (y.min() < 0 or y.max() > 9):
        raise DataError(f"'{path}' has labels outside 0..9", _REPLACE)
    return data.reshape(-1, 3, 32, 32), y


def find_batches(root: Path) -> tuple[Path, list[Path], Path | None] | None:
    """The first of ``root`` and ``root/cifar-10-batches-py`` holding batch files: that
    directory, its training batches (in order) and its test batch."""
    for d in (root, root / SUBDIR):
        train = [d / n for n in TRAIN_FILES if (d / n).is_file()]
        test = d / TEST_FILE
        if train or test.is_file():
            return d, train, test if test.is_file() else None
    return None
