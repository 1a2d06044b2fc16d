"""CIFAR-10 python batches, read with a restricted unpickler that only rebuilds numpy arrays."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.errors import DataError

_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("builtins", "dict"),
    ("builtins", "list"),
    ("_codecs", "encode"),
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"forbidden global {module}.{name}")
        return super().find_class(module, name)


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch file: ``(N, 3, 32, 32)`` uint8 images and int64 labels."""
    try:
        with path.open("rb") as fh:
            obj = _SafeUnpickler(fh, encoding="bytes").load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError) as exc:
        raise DataError(f"'{path}' is not a CIFAR batch: {exc}", "replace the file") from None
    if not isinstance(obj, dict):
        raise DataError(f"'{path}' is not a CIFAR batch (not a dict)", "replace the file")
    data = obj.get(b"data", obj.get("data"))
    labels = obj.get(b"labels", obj.get("labels"))
    if not isinstance(data, np.ndarray) or labels is None:
        raise DataError(f"'{path}' lacks 'data' or 'labels'", "replace the file")
    data = np.asarray(data, dtype=np.uint8)
    y = np.asarray(labels, dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or len(y) != len(data):
        raise DataError(f"'{path}' has data of shape {data.shape}, expected N x 3072")
    return data.reshape(-1, 3, 32, 32), y


def find_batches(root: Path) -> tuple[list[Path], Path | None]:
    """Training batch files and the test batch, flat or in ``cifar-10-batches-py/``."""
    for d in (root, root / "cifar-10-batches-py"):
        train = sorted(d.glob("data_batch_[0-9]*"))
        test = d / "test_batch"
        if train or test.is_file():
            return train, test if test.is_file() else None
    return [], None
