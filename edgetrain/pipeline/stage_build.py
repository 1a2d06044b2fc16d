"""A stage from a model: its units, how its store keeps each one, its executor, its state.

Shared by the stage processes, the data-parallel replicas and the in-process simulator, so all
of them build exactly the same thing from the same seed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgetrain.errors import EdgetrainError
from edgetrain.pipeline.accounting import Accountant, Timers
from edgetrain.pipeline.chain import Unit, build_units
from edgetrain.pipeline.executor import StageExecutor, free_module_params, unit_weights
from edgetrain.pipeline.kernels import has_formula, linear_in_params
from edgetrain.pipeline.store_mode import store_mode
from edgetrain.pipeline.stores import Hyper, StageStore, StoreChoice
from edgetrain.pipeline.table import UnitInfo


class PipelineSetupError(EdgetrainError):
    """A stage that cannot be built as asked (a layer mcPipe cannot keep as pairs)."""


def _example_inputs(units: Sequence[Unit], input_shape: Sequence[int]) -> dict[int, torch.Tensor]:
    """One example input per layer (by id), from a forward of two zero samples."""
    seen: dict[int, torch.Tensor] = {}
    handles = []
    for unit in units:
        for leaf in unit.leaves:

            def hook(m: nn.Module, inp: tuple[torch.Tensor, ...], out: object) -> None:
                seen.setdefault(id(m), inp[0].detach().clone())

            handles.append(leaf.module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            x = torch.zeros(2, *input_shape)
            for unit in units:
                for m in unit.modules():
                    x = m(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def linear_units(units: Sequence[Unit], input_shape: Sequence[int]) -> list[bool]:
    """Per unit: are all its layers linear in their own parameters? Layers with an explicit
    gradient formula are; the others are probed (before the parameters are freed)."""
    examples: dict[int, torch.Tensor] | None = None
    out = []
    for unit in units:
        ok = True
        for leaf in unit.leaves:
            if has_formula(leaf.module):
                continue
            if examples is None:
                examples = _example_inputs(units, input_shape)
            ok = ok and linear_in_params(leaf.module, examples[id(leaf.module)])
        out.append(ok)
    return out


def choose_modes(
    technique: str,
    infos: Sequence[UnitInfo],
    linear: Sequence[bool],
    store: str = "mixed",
    microbatch: int = 1,
) -> StoreChoice:
    """Each unit's store mode for ``technique``; mcPipe's ``store`` option: ``pairs`` (refuse a
    layer that is not linear in its parameters), ``mixed`` (keep such a unit as versions) or
    ``auto`` (pairs only where they are smaller than the weights, mcPipe-auto)."""
    mode = store_mode(technique)
    if mode != "pairs":
        return StoreChoice([mode] * len(infos))
    modes: list[str] = []
    reasons: dict[int, str] = {}
    for k, (info, lin) in enumerate(zip(infos, linear, strict=True)):
        if not lin:
            if store == "pairs":
                raise PipelineSetupError(
                    f"unit {info.name or info.kind} ({info.kind}) is not linear in its own "
                    "parameters, so mcPipe cannot rebuild its weights from (input, error) pairs",
                    "set [pipeline] store = 'mixed' to keep such units as weight versions",
                )
            modes.append("versions")
            reasons[k] = "not linear in its parameters"
        elif store == "auto" and info.params <= microbatch * info.pair_elems:
            modes.append("versions")
            reasons[k] = "pairs larger than the weights"
        else:
            modes.append("pairs")
    return StoreChoice(modes, reasons)


@dataclass
class Stage:
    """One stage ready to run."""

    units: list[Unit]
    store: StageStore
    executor: StageExecutor
    choice: StoreChoice


def cut(model: nn.Module, model_name: str, bounds: tuple[int, int]) -> list[Unit]:
    """The units ``[lo, hi)`` of the model (the others are left to be garbage-collected)."""
    units = build_units(model, model_name)
    lo, hi = bounds
    if not 0 <= lo < hi <= len(units):
        raise PipelineSetupError(
            f"stage units [{lo}, {hi}) do not fit the model's {len(units)} units"
        )
    return units[lo:hi]


def make_stage(
    units: list[Unit],
    infos: Sequence[UnitInfo],
    technique: str,
    hyper: Hyper,
    *,
    last: bool,
    seed: int,
    input_shape: Sequence[int],
    store: str = "mixed",
    microbatch: int = 1,
    version: int = 0,
    init: Sequence[dict[str, torch.Tensor]] | None = None,
    momentum: Sequence[dict[str, torch.Tensor] | None] | None = None,
    device: torch.device | None = None,
    chunk: int = 0,
    lowrank: bool = False,
    keep_rebuilt: bool = False,
) -> Stage:
    """The stage of ``units`` (``infos``: their table rows; ``input_shape``: the stage input's,
    per sample). ``init``/``momentum``/``version``: a resumed state. ``device`` (None: where the
    units are, the CPU): where the store keeps every weight, base and pending pair, and where
    the units' buffers go; the linearity probe runs before, on the CPU. ``chunk``: weight
    elements per chunk of the chunked unit kernels (0: off). ``lowrank``: mcPipe's Linear
    layers forward through the low-rank replay (``[pipeline] replay = "lowrank"``).
    ``keep_rebuilt``: mcPipe rebuilds each forward's weights into one kept buffer."""
    linear = (
        linear_units(units, input_shape)
        if store_mode(technique) == "pairs"
        else [True] * len(units)
    )
    choice = choose_modes(technique, infos, linear, store, microbatch)
    weights = init if init is not None else unit_weights(units)
    if device is not None:
        weights = [on_device(w, device) for w in weights]
        if momentum is not None:
            momentum = [None if b is None else on_device(b, device) for b in momentum]
    acc, timers = Accountant(), Timers()
    st = StageStore(
        units,
        weights,
        choice.modes,
        hyper,
        acc,
        timers,
        version,
        momentum,
        chunk=chunk,
        lowrank=lowrank,
        keep_rebuilt=keep_rebuilt,
    )
    del weights
    free_module_params(units)
    if device is not None:
        move_buffers(units, device)
    ex = StageExecutor(units, st, last=last, seed=seed)
    return Stage(units, st, ex, choice)


def on_device(tensors: Mapping[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """``tensors`` on ``device`` (the same tensors where they are there already)."""
    return {n: t.detach().to(device) for n, t in tensors.items()}


def move_buffers(units: Sequence[Unit], device: torch.device) -> None:
    """Move the units' buffers (running statistics) to ``device``; their parameters are the
    store's (the modules keep meta tensors, which cannot move)."""
    for unit in units:
        for mod in unit.modules():
            for m in mod.modules():
                for name, b in m._buffers.items():
                    if b is not None and b.device != device:
                        m._buffers[name] = b.to(device)


def stage_state(stage: Stage) -> dict[str, np.ndarray]:
    """The stage's newest weights and float buffers, under the model's state-dict names."""
    out: dict[str, np.ndarray] = {}
    for u, unit in enumerate(stage.units):
        for local, t in stage.store.newest(u).items():
            out[unit.state_name(local)] = t.detach().cpu().numpy().copy()
        for local, b in unit.module.named_buffers():
            if b.is_floating_point():
                out[unit.state_name(local)] = b.detach().cpu().numpy().copy()
    return out


def stage_momentum(stage: Stage) -> dict[str, np.ndarray]:
    """The momentum buffers (``optim.<name>.momentum``) of an idle stage, for checkpoints."""
    out: dict[str, np.ndarray] = {}
    for u, unit in enumerate(stage.units):
        buf = stage.store.momentum_of(u)
        if buf is not None:
            for local, t in buf.items():
                out[f"optim.{unit.state_name(local)}.momentum"] = t.detach().cpu().numpy().copy()
    return out
