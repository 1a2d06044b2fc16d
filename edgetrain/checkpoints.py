"""Run checkpoints: every worker's weights, optimiser state and mixing weight at an epoch.

``RUN/checkpoints/epoch-0005/worker-<i>.npz`` holds worker i's arrays (loaded with
``allow_pickle=False``); ``checkpoint.json`` beside them, written last, lists the workers and
their alphas and marks the checkpoint complete. A resumed run starts every worker of the recipe
from the latest complete checkpoint: a worker that had failed before it takes the alpha-weighted
average of the others' weights, and the alphas are rescaled so that they sum to 1 again (gossip
mass that was in flight at the checkpoint is not in it).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.comm.coordinator import FinalState, Resume
from edgetrain.errors import EdgetrainError
from edgetrain.gossip.mixing import weighted_average
from edgetrain.rundir import atomic_write_bytes, atomic_write_json, now_iso, worker_stem

MARKER = "checkpoint.json"


def checkpoint_dir(run_path: Path, epoch: int) -> Path:
    return run_path / "checkpoints" / f"epoch-{epoch:04d}"


def write_checkpoint(run_path: Path, epoch: int, states: dict[int, FinalState]) -> Path:
    """Write one complete checkpoint; the marker file goes last."""
    folder = checkpoint_dir(run_path, epoch)
    folder.mkdir(parents=True, exist_ok=True)
    for wid, state in states.items():
        buf = io.BytesIO()
        np.savez(buf, **state.weights)  # type: ignore[arg-type]
        atomic_write_bytes(folder / f"{worker_stem(wid)}.npz", buf.getvalue())
    marker: dict[str, Any] = {
        "epoch": epoch,
        "time": now_iso(),
        "workers": {str(i): {"alpha": s.alpha} for i, s in sorted(states.items())},
    }
    atomic_write_json(folder / MARKER, marker)
    return folder


def latest_checkpoint(run_path: Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or None."""
    root = run_path / "checkpoints"
    if not root.is_dir():
        return None
    done = sorted(p for p in root.glob("epoch-*") if (p / MARKER).is_file())
    return done[-1] if done else None


def load_resume(run_path: Path, num_workers: int) -> Resume:
    """The resume point of a run: its latest checkpoint, spread over ``num_workers`` workers."""
    folder = latest_checkpoint(run_path)
    if folder is None:
        raise EdgetrainError(
            f"{run_path} has no complete checkpoint to resume from; set [run] checkpoint_every "
            "to a number of epochs and start the run again"
        )
    try:
        marker = json.loads((folder / MARKER).read_text())
        epoch = int(marker["epoch"])
        alphas = {int(k): float(v["alpha"]) for k, v in marker["workers"].items()}
        states: dict[int, FinalState] = {}
        for wid, alpha in alphas.items():
            with np.load(folder / f"{worker_stem(wid)}.npz", allow_pickle=False) as npz:
                weights = {k: np.array(npz[k]) for k in npz.files}
            states[wid] = FinalState(alpha, weights, {"epoch": epoch})
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise EdgetrainError(f"checkpoint {folder} is unreadable ({exc}); delete it") from None
    if not states or max(states) >= num_workers:
        raise EdgetrainError(
            f"checkpoint {folder} does not match the recipe's {num_workers} workers"
        )
    return Resume(epoch, spread_states(states, num_workers))


def spread_states(states: dict[int, FinalState], num_workers: int) -> dict[int, FinalState]:
    """A state for every worker with alphas summing to 1 (see the module docstring)."""
    total = sum(s.alpha for s in states.values())
    if total <= 0:
        raise EdgetrainError("checkpoint alphas sum to zero; it cannot be resumed")
    share = len(states) / num_workers
    out = {i: FinalState(s.alpha / total * share, s.weights, s.meta) for i, s in states.items()}
    missing = [i for i in range(num_workers) if i not in states]
    if missing:
        model_only = [
            (s.alpha, {k: v for k, v in s.weights.items() if not k.startswith("optim.")})
            for s in states.values()
        ]
        average = weighted_average(model_only)
        for i in missing:
            out[i] = FinalState(1.0 / num_workers, average, {"from_average": True})
    return out
