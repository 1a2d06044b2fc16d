"""The device a worker computes on: started in its set-up, tensors moved to and from the wire,
and its memory measured.

``[train] device`` names it (cpu, cuda, or auto: cuda where there is one); a recipe that asks
for cuda where there is none is refused in one line (exit 2) by
:func:`~edgetrain.runtime.trainer.resolve_device`, as in every family. What crosses hosts
(activations, errors, gradients, snapshots) travels as host arrays: a tensor goes to the CPU for
the wire and to the device on receipt. On the CPU every move here is free (the tensor itself)
but the receipt's, which copies the read-only received buffer into a tensor of its own.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from edgetrain.runtime.trainer import resolve_device


def start_device(name: str) -> torch.device:
    """The device of the recipe's ``name``, started now: on CUDA the context is created here,
    in the role's set-up, where the coordinator allows for a slow start
    (:data:`~edgetrain.comm.coordinator.SETUP_GRACE_S`), not in its first step."""
    device = resolve_device(name)
    if device.type == "cuda":
        torch.cuda.init()
        torch.zeros(1, device=device)  # the first allocation creates the context
    return device


def to_host(t: torch.Tensor) -> np.ndarray:
    """``t`` as a host array for the wire (a CPU tensor's own memory, not a copy)."""
    return t.detach().cpu().numpy()


def from_host(arr: np.ndarray, device: torch.device) -> torch.Tensor:
    """A received (read-only) array as a tensor of its own on ``device``: one copy, on the CPU
    or straight to the device."""
    if device.type == "cpu":
        return torch.from_numpy(np.array(arr, copy=True))
    with warnings.catch_warnings():  # read-only: it is only read, by the copy to the device
        warnings.simplefilter("ignore", UserWarning)
        host = torch.from_numpy(arr)
    return host.to(device)


def reset_memory_peaks(device: torch.device) -> None:
    """Start the accelerator's peak figures afresh (after set-up, as the RSS baseline is taken):
    the cached blocks set-up left are handed back first. Nothing on the CPU."""
    if device.type != "cuda":
        return
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)


def memory_figures(device: torch.device) -> dict[str, int]:
    """The accelerator's memory since :func:`reset_memory_peaks`: the peak of what tensors held
    (``max_memory_allocated``), of what the caching allocator reserved from the driver
    (``max_memory_reserved``), and what tensors hold now. Empty on the CPU: those figures are
    the process's RSS and the store's own accounting."""
    if device.type != "cuda":
        return {}
    return {
        "accelerator_allocated_peak_bytes": int(torch.cuda.max_memory_allocated(device)),
        "accelerator_reserved_peak_bytes": int(torch.cuda.max_memory_reserved(device)),
        "accelerator_allocated_bytes": int(torch.cuda.memory_allocated(device)),
    }
