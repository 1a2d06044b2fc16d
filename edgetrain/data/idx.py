"""IDX files (MNIST, Fashion-MNIST): gzipped or plain, validated before use."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from edgetrain.errors import DataError

_DTYPES: dict[int, str] = {
    0x08: "u1",
    0x09: "i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}
_MAX_BYTES = 2**31


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (gzip detected by its magic bytes, not its name)."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as fh:
                raw = fh.read(_MAX_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DataError(f"cannot read IDX file '{path}': {exc}", "replace the file") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise DataError(f"'{path}' is not an IDX file (bad magic number)", "replace the file")
    ndim = raw[3]
    if ndim < 1 or len(raw) < 4 + 4 * ndim:
        raise DataError(f"'{path}' has a truncated IDX header", "replace the file")
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    dtype = np.dtype(_DTYPES[raw[2]])
    want = int(np.prod(dims)) * dtype.itemsize
    body = raw[4 + 4 * ndim :]
    if len(body) != want:
        raise DataError(
            f"'{path}' is truncated or corrupt: {len(body)} data bytes, expected {want}",
            "replace the file",
        )
    return np.frombuffer(body, dtype=dtype).reshape(dims)


def find_idx(root: Path, stem: str, subdirs: tuple[str, ...]) -> Path | None:
    """``root[/sub]/stem`` or ``stem.gz``, the first that exists."""
    for d in (root, *(root / s for s in subdirs)):
        for name in (stem, f"{stem}.gz"):
            if (d / name).is_file():
                return d / name
    return None


def load_idx_pair(images: Path, labels: Path) -> tuple[np.ndarray, np.ndarray]:
    x = read_idx(images)
    y = read_idx(labels)
    if x.ndim != 3:
        raise DataError(f"'{images}' holds {x.ndim}-d data, expected N x H x W images")
    if y.ndim != 1 or len(y) != len(x):
        raise DataError(f"'{labels}' has {len(y)} labels for {len(x)} images in '{images}'")
    return x, y.astype(np.int64)
