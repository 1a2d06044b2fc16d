"""IDX files (MNIST, Fashion-MNIST): gzipped or plain, located and validated before use."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

import numpy as np

from edgetrain.errors import DataError

#: IDX type codes (third magic byte) and the numpy dtypes they stand for (big-endian data).
_DTYPES: dict[int, str] = {
    0x08: "u1",
    0x09: "i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}
_GZIP_MAGIC = b"\x1f\x8b"
_MAX_BYTES = 2**31  # far above the 47 MB of MNIST's training images
_REPLACE = "replace the file with an intact copy"

#: The four files of an IDX image dataset: split -> (images stem, labels stem).
IDX_STEMS: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _read_bytes(path: Path) -> bytes:
    """The file's contents, gunzipped when it starts with the gzip magic (whatever its name)."""
    try:
        raw = path.read_bytes()
        if raw[:2] == _GZIP_MAGIC:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
                raw = fh.read(_MAX_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"cannot read IDX file '{path}': {exc}", _REPLACE) from None
    if len(raw) > _MAX_BYTES:
        raise DataError(f"IDX file '{path}' is larger than {_MAX_BYTES} bytes", _REPLACE)
    return raw


def read_idx(path: Path, ndim: int | None = None, dtype_code: int | None = None) -> np.ndarray:
    """Read one IDX file; check its magic, type code, dimensions and length.

    ``ndim`` and ``dtype_code`` (e.g. ``3`` and ``0x08`` for uint8 images) are checked when
    given. Every problem raises :class:`DataError` naming the file.
    """
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES or raw[3] == 0:
        magic = raw[:4].hex() or "empty"
        raise DataError(f"'{path}' is not an IDX file (bad magic number {magic})", _REPLACE)
    code, nd = raw[2], raw[3]
    if dtype_code is not None and code != dtype_code:
        raise DataError(
            f"'{path}' holds IDX type 0x{code:02x}, expected 0x{dtype_code:02x} (unsigned bytes)",
            "check that it is the right file",
        )
    if ndim is not None and nd != ndim:
        raise DataError(
            f"'{path}' holds {nd}-dimensional data, expected {ndim}",
            "check that it is the right file (images are 3-d, labels 1-d)",
        )
    header = 4 + 4 * nd
    if len(raw) < header:
        raise DataError(f"'{path}' is truncated: its IDX header is incomplete", _REPLACE)
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(nd)]
    dtype = np.dtype(_DTYPES[code])
    want = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    have = len(raw) - header
    if have < want:
        raise DataError(
            f"'{path}' is truncated: {have} data bytes, expected {want} for shape {dims}",
            _REPLACE,
        )
    if have > want:
        raise DataError(
            f"'{path}' is corrupt: {have} data bytes, expected {want} for shape {dims}",
            _REPLACE,
        )
    return np.frombuffer(raw, dtype=dtype, count=int(np.prod(dims)), offset=header).reshape(dims)


def _candidates(stem: str) -> tuple[str, ...]:
    dotted = stem.replace("-idx", ".idx")  # some mirrors name them train-images.idx3-ubyte
    return (stem, f"{stem}.gz", dotted, f"{dotted}.gz")


def find_file(directory: Path, stem: str) -> Path | None:
    """``directory/stem`` plain or ``.gz`` (or a mirror's dotted spelling), if one exists."""
    for name in _candidates(stem):
        if (directory / name).is_file():
            return directory / name
    return None


def locate(root: Path, subdirs: tuple[str, ...]) -> tuple[Path, dict[str, Path | None]] | None:
    """The first of ``root`` and ``root/<subdir>`` holding any IDX file, and what it holds."""
    for d in (root, *(root / s for s in subdirs)):
        found = {s: find_file(d, s) for pair in IDX_STEMS.values() for s in pair}
        if any(found.values()):
            return d, found
    return None


def load_pair(images: Path, labels: Path) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(N, H, W)`` uint8 and labels ``(N,)`` int64 from an IDX pair."""
    x = read_idx(images, ndim=3, dtype_code=0x08)
    y = read_idx(labels, ndim=1, dtype_code=0x08)
    if len(y) != len(x):
        raise DataError(
            f"'{labels}' has {len(y)} labels but '{images}' has {len(x)} images",
            "use the labels file that belongs to these images",
        )
    return x, y.astype(np.int64)
