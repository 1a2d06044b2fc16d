"""Stratified splits remembered on disk: ``train_test_split`` imports scikit-learn's model
selection (scipy with it), a second or more of start-up in the launcher and in every worker of
every run, for the same indices each time.

The indices of a split are a pure function of (the sizes, the seed, the labels, scikit-learn's
version): they are kept under ``$EDGETRAIN_CACHE_DIR`` (default ``~/.cache/edgetrain``) in
``splits/<key>.npz``, written atomically, read without pickle and checked before use. A cache
that cannot be read or written is passed over: the split is computed as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
from importlib import metadata
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

__all__ = ["cache_dir", "cached_split"]


def cache_dir() -> Path:
    """Where edgetrain keeps what it can compute again (``$EDGETRAIN_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/edgetrain``, else ``~/.cache/edgetrain``)."""
    env = os.environ.get("EDGETRAIN_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "edgetrain" if xdg else Path.home() / ".cache" / "edgetrain"


def _sklearn_version() -> str:
    try:
        return metadata.version("scikit-learn")
    except metadata.PackageNotFoundError:
        return "none"


def _key(n: int, first: int, seed: int, stratify: np.ndarray | None) -> str:
    h = hashlib.sha256(f"split-v1|{n}|{first}|{seed}|{_sklearn_version()}|".encode())
    if stratify is None:
        h.update(b"unstratified")
    else:
        h.update(np.ascontiguousarray(stratify, dtype=np.int64).tobytes())
    return h.hexdigest()[:40]


def _valid(a: np.ndarray, b: np.ndarray, n: int, first: int) -> bool:
    if a.ndim != 1 or b.ndim != 1 or len(a) != first or len(a) + len(b) != n:
        return False
    if a.dtype.kind not in "iu" or b.dtype.kind not in "iu":
        return False
    both = np.concatenate([a, b])
    return bool(len(both) == 0 or (both.min() >= 0 and both.max() < n)) and len(
        np.unique(both)
    ) == len(both)


def _read(path: Path, n: int, first: int) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        with np.load(path, allow_pickle=False) as npz:
            a, b = npz["first"], npz["second"]
    except (OSError, ValueError, KeyError):
        return None
    return (a.astype(np.int64), b.astype(np.int64)) if _valid(a, b, n, first) else None


def _write(path: Path, a: np.ndarray, b: np.ndarray) -> None:
    from edgetrain.rundir import atomic_write_bytes

    buf = io.BytesIO()
    np.savez(buf, first=a.astype(np.int64), second=b.astype(np.int64))
    with contextlib.suppress(OSError):
        atomic_write_bytes(path, buf.getvalue())


def cached_split(
    n: int, first: int, seed: int, stratify: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """``train_test_split(arange(n), train_size=first, random_state=seed, stratify=...)``
    (both parts sorted), from the cache where it holds this split."""
    path = cache_dir() / "splits" / f"{_key(n, first, seed, stratify)}.npz"
    found = _read(path, n, first)
    if found is not None:
        return found
    from sklearn.model_selection import train_test_split

    a, b = train_test_split(np.arange(n), train_size=first, random_state=seed, stratify=stratify)
    a, b = np.sort(a), np.sort(b)
    _write(path, a, b)
    return a, b
