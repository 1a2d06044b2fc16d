"""Run checkpoints: every worker's hand-in (arrays plus the family's metadata) at an epoch.

``RUN/checkpoints/epoch-0005/worker-<i>.npz`` holds worker i's arrays (loaded with
``allow_pickle=False``); ``checkpoint.json`` beside them, written last, lists the workers with
their roles and hand-in metadata and marks the checkpoint complete. What the metadata means is
the family's business: a resumed run asks the family to spread the checkpoint over the
recipe's workers (:meth:`~edgetrain.runtime.base.Family.resume`). Checkpoints written before
hand-ins were opaque (``{"alpha": a}`` per worker) still load.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.comm.control import HandIn, Role
from edgetrain.errors import EdgetrainError
from edgetrain.rundir import atomic_write_bytes, atomic_write_json, now_iso, worker_stem

MARKER = "checkpoint.json"


def checkpoint_dir(run_path: Path, epoch: int) -> Path:
    return run_path / "checkpoints" / f"epoch-{epoch:04d}"


def write_checkpoint(
    run_path: Path,
    epoch: int,
    handins: Mapping[int, HandIn],
    roles: Mapping[int, Role] | None = None,
    about: Mapping[str, Any] | None = None,
) -> Path:
    """Write one complete checkpoint; the marker file goes last."""
    folder = checkpoint_dir(run_path, epoch)
    folder.mkdir(parents=True, exist_ok=True)
    for wid, handin in handins.items():
        buf = io.BytesIO()
        np.savez(buf, **handin.weights)  # type: ignore[arg-type]
        atomic_write_bytes(folder / f"{worker_stem(wid)}.npz", buf.getvalue())
    workers: dict[str, Any] = {}
    for wid, handin in sorted(handins.items()):
        entry: dict[str, Any] = {"meta": handin.meta}
        if roles is not None and wid in roles:
            entry["role"] = str(roles[wid])
        workers[str(wid)] = entry
    marker = {"epoch": epoch, "time": now_iso(), **(about or {}), "workers": workers}
    atomic_write_json(folder / MARKER, marker)
    return folder


def latest_checkpoint(run_path: Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or None."""
    root = run_path / "checkpoints"
    if not root.is_dir():
        return None
    done = sorted(p for p in root.glob("epoch-*") if (p / MARKER).is_file())
    return done[-1] if done else None


def load_checkpoint(run_path: Path) -> tuple[int, dict[int, HandIn]]:
    """The latest complete checkpoint of a run: its epoch and each worker's hand-in."""
    folder = latest_checkpoint(run_path)
    if folder is None:
        raise EdgetrainError(
            f"{run_path} has no complete checkpoint to resume from; set [run] checkpoint_every "
            "to a number of epochs and start the run again"
        )
    try:
        marker = json.loads((folder / MARKER).read_text())
        epoch = int(marker["epoch"])
        handins: dict[int, HandIn] = {}
        for key, entry in marker["workers"].items():
            meta = entry.get("meta", {"alpha": entry["alpha"]} if "alpha" in entry else {})
            if not isinstance(meta, dict):
                raise ValueError(f"worker {key}'s metadata is not an object")
            with np.load(folder / f"{worker_stem(int(key))}.npz", allow_pickle=False) as npz:
                weights = {k: np.array(npz[k]) for k in npz.files}
            handins[int(key)] = HandIn(weights, meta)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        raise EdgetrainError(f"checkpoint {folder} is unreadable ({exc}); delete it") from None
    if not handins:
        raise EdgetrainError(f"checkpoint {folder} holds no worker; delete it")
    return epoch, handins
