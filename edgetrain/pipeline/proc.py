"""What every pipeline process sets up: its threads, the allocator, the seeded model, the
microbatch and SGD settings, the resumed state, and the epoch-end snapshots it sends.

Shared by stages and replicas, so every technique starts from the same weights and draws the
same microbatches from the same seed."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from edgetrain.comm.control import HandIn
from edgetrain.errors import EdgetrainError
from edgetrain.pipeline.config import PipelineSection
from edgetrain.pipeline.stores import Hyper
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import WorkerContext

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3


def set_mmap_threshold(nbytes: int | None) -> bool:
    """Fix glibc's mmap threshold (``MALLOC_MMAP_THRESHOLD_`` at run time): large freed
    buffers go back to the OS at once, so RSS follows what the store holds. False where
    mallopt is not available."""
    if nbytes is None:
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return False
    mallopt = getattr(libc, "mallopt", None)
    return bool(mallopt(_M_MMAP_THRESHOLD, int(nbytes))) if mallopt is not None else False


def start_process(ctx: WorkerContext) -> PipelineSection:
    """Threads from the worker group, the allocator setting; the ``[pipeline]`` section."""
    recipe = ctx.recipe
    torch.set_num_threads(recipe.expanded_workers()[ctx.worker_id].threads)
    cfg = PipelineSection.of(recipe)
    if cfg.mmap_threshold is not None and not set_mmap_threshold(cfg.mmap_threshold):
        log.warning("could not set the mmap threshold (no glibc mallopt)")
    return cfg


def hyper_of(recipe: Recipe) -> Hyper:
    t = recipe.train
    return Hyper(t.lr, t.momentum, t.weight_decay)


def microbatch_of(recipe: Recipe, cfg: PipelineSection) -> int:
    return cfg.microbatch or recipe.train.batch_size


def collect() -> None:
    """Free what the full model left behind (other stages' units)."""
    gc.collect()


def resumed_units(
    resume: HandIn | None,
    names: Sequence[Sequence[tuple[str, str]]],
    momentum: bool,
) -> tuple[list[dict[str, torch.Tensor]] | None, list[dict[str, torch.Tensor] | None] | None]:
    """A checkpoint's weights (and momentum) per unit, by state-dict names ``names[u]``."""
    if resume is None:
        return None, None
    weights: list[dict[str, torch.Tensor]] = []
    bufs: list[dict[str, torch.Tensor] | None] = []
    for unit_names in names:
        w: dict[str, torch.Tensor] = {}
        b: dict[str, torch.Tensor] = {}
        for local, state in unit_names:
            if state not in resume.weights:
                raise EdgetrainError(f"the checkpoint lacks {state}; it is not this partition's")
            w[local] = torch.from_numpy(np.array(resume.weights[state], dtype=np.float32))
            key = f"optim.{state}.momentum"
            if momentum and key in resume.weights:
                b[local] = torch.from_numpy(np.array(resume.weights[key], dtype=np.float32))
        weights.append(w)
        bufs.append(b if momentum and b else None)
    return weights, (bufs if momentum else None)


def restore_buffers(modules: Sequence[tuple[str, torch.Tensor]], arrays: Mapping[str, Any]) -> None:
    """Copy checkpointed buffers (running statistics) into the live ones."""
    with torch.no_grad():
        for state, buf in modules:
            if state in arrays:
                buf.copy_(torch.from_numpy(np.array(arrays[state])).reshape(buf.shape))
