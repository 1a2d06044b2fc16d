"""Run a unit with the store's weights in place of its own parameters, cheaply.

:func:`torch.func.functional_call` rebuilds its bookkeeping (named members, tied weights, an
accessor) on every call, which costs more than a small layer's forward. A unit whose layers all
read their parameters as plain attributes (the layers with an explicit weight-gradient formula:
Linear, ConvNd, BatchNorm, LayerNorm, and blocks made of them) has its parameter slots listed
once; a call puts the store's tensors into those slots, runs the module, and puts the old ones
back. The same module is called with the same tensors, so the numbers are the same. Any other
unit (an LSTM keeps a cached list of its weights) goes through ``functional_call``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn
from torch.func import functional_call

from edgetrain.pipeline.chain import Unit
from edgetrain.pipeline.kernels import has_formula

Slot = tuple[nn.Module, str, str]  # (module, attribute, unit-local name)


class ParamSlots:
    """Where each parameter of a unit lives, and their unit-local names."""

    def __init__(self, slots: list[Slot]) -> None:
        self.slots = slots
        self.keys = frozenset(key for *_, key in slots)


def param_slots(unit: Unit) -> ParamSlots | None:
    """The unit's parameter slots, or None if a layer of it has no formula."""
    if not all(has_formula(leaf.module) for leaf in unit.leaves):
        return None
    slots: list[Slot] = []
    for prefix, mod in unit.module.named_modules():
        for attr, p in mod._parameters.items():
            if p is not None:
                slots.append((mod, attr, f"{prefix}.{attr}" if prefix else attr))
    return ParamSlots(slots)


def call_with(
    module: nn.Module,
    slots: ParamSlots | None,
    weights: Mapping[str, torch.Tensor],
    x: torch.Tensor,
) -> torch.Tensor:
    """``module(x)`` with ``weights`` (unit-local names) as its parameters, through the
    unit's ``slots`` when they name exactly the weights given, else ``functional_call``."""
    if slots is None or weights.keys() != slots.keys:
        out: torch.Tensor = functional_call(module, dict(weights), (x,), strict=False)
        return out
    old: list[tuple[nn.Module, str, object]] = []
    try:
        for mod, attr, key in slots.slots:
            old.append((mod, attr, mod._parameters[attr]))
            mod._parameters[attr] = weights[key]  # type: ignore[assignment]
        y: torch.Tensor = module(x)
        return y
    finally:
        for mod, attr, was in old:
            mod._parameters[attr] = was  # type: ignore[assignment]
