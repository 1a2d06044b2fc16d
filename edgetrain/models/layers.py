"""Ordered layer specs: the parametric layers of a model in execution order, for scheduling.

A module with parameters of its own is a layer. Parameter-free modules (activations, pooling,
flatten, resize) belong to the next parametric layer (``folded``); trailing ones fold into the
last layer. The order is found by running one forward pass (eval mode, batch of 1, no
gradients), so it is the order in which layers compute, not the order in which they were
registered. A module that is called twice counts once, at its first call; a parameter shared
by several modules belongs to the first that runs.

The specs always cover every parameter exactly once:
- a non-leaf module with parameters of its own (a position embedding on an encoder block) is
  a layer at the position where its forward is first entered, before its children;
- parameters of modules that never run (unused heads) and of the root module itself come
  last, one layer per module: the root first (named ``<root>``), then the others in
  registration order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class LayerSpec:
    """One parametric layer: its name, kind, parameter tensors and their size."""

    name: str
    kind: str
    params: tuple[str, ...]
    param_shapes: tuple[tuple[int, ...], ...]
    param_bytes: int
    num_params: int
    folded: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["params"] = list(self.params)
        d["param_shapes"] = [list(s) for s in self.param_shapes]
        d["folded"] = list(self.folded)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LayerSpec:
        """The inverse of :meth:`to_dict`."""
        return cls(
            name=str(data["name"]),
            kind=str(data["kind"]),
            params=tuple(str(p) for p in data["params"]),
            param_shapes=tuple(tuple(int(d) for d in s) for s in data["param_shapes"]),
            param_bytes=int(data["param_bytes"]),
            num_params=int(data["num_params"]),
            folded=tuple(str(f) for f in data.get("folded", ())),
        )


def _spec(
    name: str, kind: str, params: list[tuple[str, torch.Tensor]], folded: list[str]
) -> LayerSpec:
    return LayerSpec(
        name=name,
        kind=kind,
        params=tuple(n for n, _ in params),
        param_shapes=tuple(tuple(p.shape) for _, p in params),
        param_bytes=sum(p.numel() * p.element_size() for _, p in params),
        num_params=sum(p.numel() for _, p in params),
        folded=tuple(folded),
    )


def _execution_order(model: nn.Module, input_shape: tuple[int, int, int]) -> list[str]:
    """Names of modules in the order their forward is first entered."""
    order: list[str] = []
    seen: set[str] = set()
    handles = []
    for name, module in model.named_modules():
        if not name:
            continue

        def hook(_m: nn.Module, _inp: Any, name: str = name) -> None:
            if name not in seen:
                seen.add(name)
                order.append(name)

        handles.append(module.register_forward_pre_hook(hook))
    was_training = model.training
    first = next(model.parameters(), None)
    device = first.device if first is not None else torch.device("cpu")
    dtype = first.dtype if first is not None and first.is_floating_point() else torch.float32
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, *input_shape, device=device, dtype=dtype))
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    return order


def layer_specs(model: nn.Module, input_shape: tuple[int, int, int]) -> list[LayerSpec]:
    """The model's parametric layers in execution order (see the module docstring).

    ``param_bytes`` counts parameters only, not buffers such as BatchNorm running statistics.
    The model's training mode is restored afterwards.
    """
    modules = dict(model.named_modules())
    taken: set[int] = set()

    def own_params(name: str) -> list[tuple[str, torch.Tensor]]:
        out = []
        for pname, p in modules[name].named_parameters(recurse=False):
            if id(p) not in taken:
                taken.add(id(p))
                out.append((f"{name}.{pname}" if name else pname, p))
        return out

    specs: list[LayerSpec] = []
    pending: list[str] = []
    for name in _execution_order(model, input_shape):
        module = modules[name]
        params = own_params(name)
        if params:
            specs.append(_spec(name, type(module).__name__, params, pending))
            pending = []
        elif not any(True for _ in module.children()):
            pending.append(name)
    fold_trailing(specs, pending)
    for name, module in modules.items():  # modules that never ran, and the root's own params
        params = own_params(name)
        if params:
            specs.append(_spec(name or "<root>", type(module).__name__, params, []))
    return specs


def fold_trailing(specs: list[LayerSpec], pending: list[str]) -> None:
    """Fold trailing parameter-free modules into the last layer, in place."""
    if pending and specs:
        specs[-1] = replace(specs[-1], folded=specs[-1].folded + tuple(pending))


def model_summary(specs: list[LayerSpec]) -> dict[str, int]:
    """Totals over the layers: ``{"layers": n, "params": count, "bytes": size}``."""
    return {
        "layers": len(specs),
        "params": sum(s.num_params for s in specs),
        "bytes": sum(s.param_bytes for s in specs),
    }
