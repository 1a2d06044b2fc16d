"""Weights as named arrays: model and optimiser state in and out, and one fingerprint for both.

Hand-ins, checkpoints and final models travel as ``{name: numpy array}``; optimiser state
rides along as ``optim.<parameter index>.<key>`` arrays. :func:`model_sha256` fingerprints a
set of arrays in a fixed order, so two runs that must produce the same model (a deterministic
technique under two schedules, the same seed on two launchers) compare by one string.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from edgetrain.comm.wire import arrays_from_state
from edgetrain.runtime.base import HandInError

OPTIM_PREFIX = "optim."


def model_sha256(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over every array sorted by name: its name, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def float_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's floating-point state entries; they share storage with the model."""
    return {k: v for k, v in model.state_dict().items() if v.is_floating_point()}


def model_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's arrays of a hand-in (its optimiser state left out)."""
    return {k: v for k, v in arrays.items() if not k.startswith(OPTIM_PREFIX)}


def optimizer_arrays(optimizer: torch.optim.Optimizer) -> dict[str, np.ndarray]:
    """The optimiser's per-parameter state as ``optim.<i>.<key>`` arrays."""
    out: dict[str, np.ndarray] = {}
    for idx, entries in optimizer.state_dict()["state"].items():
        for key, value in entries.items():
            if hasattr(value, "detach"):
                out[f"{OPTIM_PREFIX}{idx}.{key}"] = value.detach().cpu().numpy().copy()
    return out


def state_arrays(
    state: Mapping[str, Any], optimizer: torch.optim.Optimizer | None
) -> dict[str, np.ndarray]:
    """A snapshot of ``state`` (and the optimiser's) as owned arrays, for a hand-in."""
    out = arrays_from_state(state)
    if optimizer is not None:
        out.update(optimizer_arrays(optimizer))
    return out


@torch.no_grad()
def load_arrays(
    state: Mapping[str, torch.Tensor],
    arrays: Mapping[str, np.ndarray],
    optimizer: torch.optim.Optimizer | None = None,
    what: str = "checkpoint",
) -> None:
    """Copy ``arrays`` into ``state`` in place (and the optimiser's state, if any is there)."""
    missing = sorted(set(state) - set(arrays))
    if missing:
        raise HandInError(f"the {what} lacks {len(missing)} tensors, e.g. {missing[0]}")
    for name, tensor in state.items():
        value = np.asarray(arrays[name])
        if value.size != tensor.numel():
            raise HandInError(f"the {what}'s {name} has {value.size} values, not {tensor.numel()}")
        tensor.copy_(torch.from_numpy(np.array(value)).reshape(tensor.shape))
    if optimizer is None:
        return
    restored: dict[int, dict[str, Any]] = {}
    for name, value in arrays.items():
        parts = name.split(".")
        if len(parts) == 3 and name.startswith(OPTIM_PREFIX) and parts[1].isdigit():
            restored.setdefault(int(parts[1]), {})[parts[2]] = torch.from_numpy(np.array(value))
    if restored:
        opt = optimizer.state_dict()
        opt["state"] = restored
        optimizer.load_state_dict(opt)
