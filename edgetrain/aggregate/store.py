"""Aggregates on disk: ``RUN/data/aggregates-<partition>.npz``, written atomically, read safely."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.aggregate.aggregates import Aggregates
from edgetrain.errors import DataError, EdgetrainError
from edgetrain.rundir import atomic_write_bytes

_ARRAYS = ("points", "labels", "member_offsets", "member_indices")
_STRINGS = ("method", "timings", "meta")
_INTS = ("ratio", "seed", "dims")


def aggregates_path(run_dir: Path, partition: str) -> Path:
    """``RUN/data/aggregates-<partition>.npz`` (partition: a worker index, or ``all``)."""
    return Path(run_dir) / "data" / f"aggregates-{partition}.npz"


def write_aggregates(path: Path, agg: Aggregates) -> None:
    """Write ``agg`` as an uncompressed ``.npz`` through a temporary file and a rename.

    Strings (``method``; ``timings`` and ``meta`` as JSON text) are 0-d unicode arrays and the
    integers 0-d int64 arrays, so the file loads with ``allow_pickle=False``.
    """
    buf = io.BytesIO()
    arrays: dict[str, np.ndarray] = {name: getattr(agg, name) for name in _ARRAYS}
    arrays["method"] = np.array(agg.method)
    arrays["timings"] = np.array(agg.timings_json())
    arrays["meta"] = np.array(json.dumps(agg.meta))
    arrays.update({name: np.array(getattr(agg, name), dtype=np.int64) for name in _INTS})
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    try:
        atomic_write_bytes(Path(path), buf.getvalue())
    except OSError as exc:
        raise EdgetrainError(
            f"cannot write '{path}': {exc.strerror or exc}", "pass a writable --run-dir"
        ) from None


def _load(path: Path) -> dict[str, Any]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except FileNotFoundError:
        raise DataError(f"aggregates file '{path}' not found", "run edgetrain aggregate") from None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"'{path}' is not a readable aggregates file: {exc}") from None


def read_aggregates(path: Path) -> Aggregates:
    """Read and check an aggregates file; raise :class:`DataError` on anything inconsistent."""
    data = _load(Path(path))
    missing = [k for k in (*_ARRAYS, *_STRINGS, *_INTS) if k not in data]
    if missing:
        raise DataError(
            f"'{path}' lacks {', '.join(missing)}", "rebuild it with edgetrain aggregate"
        )
    offsets, indices = data["member_offsets"], data["member_indices"]
    m = len(data["points"])
    ok = (
        len(data["labels"]) == m
        and len(offsets) == m + 1
        and int(offsets[0]) == 0
        and int(offsets[-1]) == len(indices)
        and bool(np.all(np.diff(offsets) > 0))
    )
    if not ok:
        raise DataError(f"'{path}' has inconsistent points, labels and membership arrays")
    try:
        timings = {str(k): float(v) for k, v in json.loads(str(data["timings"])).items()}
        meta = json.loads(str(data["meta"]))
    except (ValueError, AttributeError) as exc:
        raise DataError(f"'{path}' has unreadable timings or meta: {exc}") from None
    return Aggregates(
        points=data["points"],
        labels=data["labels"].astype(np.int64),
        member_offsets=offsets.astype(np.int64),
        member_indices=indices.astype(np.int64),
        method=str(data["method"]),
        timings=timings,
        ratio=int(data["ratio"]),
        seed=int(data["seed"]),
        dims=int(data["dims"]),
        meta=meta if isinstance(meta, dict) else {},
    )
