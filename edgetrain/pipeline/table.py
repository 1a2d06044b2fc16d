"""The unit table: each unit's parameters, input and output shapes, pair sizes and MACs per
sample, found by one forward pass (on the meta device when the model is built there).

Plain data: the partitioner, the memory formulas and the plan file work from it, and a stage
checks its own units against a plan by it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from edgetrain.models.twin import cpu_twin, needs_twin
from edgetrain.pipeline.chain import Unit


@dataclass(frozen=True)
class LeafInfo:
    kind: str
    x_elems: int  # per sample, per call
    y_elems: int
    params: int


@dataclass(frozen=True)
class UnitInfo:
    """One unit, sizes per sample (multiply by the microbatch for a microbatch)."""

    index: int
    name: str
    kind: str
    params: int
    param_bytes: int
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    pair_elems: int  # sum over layer calls of (input + output) elements
    macs: int
    leaves: tuple[LeafInfo, ...]

    @property
    def out_elems(self) -> int:
        return math.prod(self.out_shape)

    @property
    def in_elems(self) -> int:
        return math.prod(self.in_shape)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["in_shape"] = list(self.in_shape)
        d["out_shape"] = list(self.out_shape)
        d["leaves"] = [asdict(leaf) for leaf in self.leaves]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> UnitInfo:
        return cls(
            int(d["index"]), str(d["name"]), str(d["kind"]), int(d["params"]),
            int(d["param_bytes"]), tuple(int(x) for x in d["in_shape"]),
            tuple(int(x) for x in d["out_shape"]), int(d["pair_elems"]), int(d["macs"]),
            tuple(LeafInfo(str(lf["kind"]), int(lf["x_elems"]), int(lf["y_elems"]),
                           int(lf["params"])) for lf in d.get("leaves", [])),
        )  # fmt: skip


def _macs(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> int:
    per = y.numel() // max(1, y.shape[0])
    if isinstance(module, nn.Linear):
        return per * module.in_features
    if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        return per * (module.in_channels // module.groups) * math.prod(module.kernel_size)
    return 2 * per


def unit_table(units: Sequence[Unit], input_shape: Sequence[int]) -> list[UnitInfo]:
    """Run the chain once on one sample (zeros) and measure every unit and layer call: on a CPU
    twin of units built on the meta device (:mod:`edgetrain.models.twin`)."""
    if needs_twin(m for unit in units for m in unit.modules()):
        units = cpu_twin(list(units))
    first = next(units[0].module.parameters())
    device = first.device
    calls: list[tuple[nn.Module, int, int, int]] = []

    def hook(mod: nn.Module, inp: tuple[Any, ...], out: Any) -> None:
        x = inp[0]
        calls.append((mod, x.numel(), out.numel(), _macs(mod, x, out)))

    out: list[UnitInfo] = []
    x = torch.zeros(1, *input_shape, device=device)
    with torch.no_grad():
        for unit in units:
            handles = [leaf.module.register_forward_hook(hook) for leaf in unit.leaves]
            was = [m.training for m in unit.modules()]
            for m in unit.modules():
                m.eval()
            try:
                in_shape = tuple(x.shape[1:])
                for m in unit.pre:
                    x = m(x)
                calls.clear()
                x = unit.module(x)
                out_shape = tuple(x.shape[1:])
                for m in unit.post:
                    x = m(x)
            finally:
                for h in handles:
                    h.remove()
                for m, w in zip(unit.modules(), was, strict=True):
                    m.train(w)
            params = sum(p.numel() for p in unit.module.parameters())
            nbytes = sum(p.numel() * p.element_size() for p in unit.module.parameters())
            leaves = tuple(
                LeafInfo(
                    type(m).__name__, xe, ye, sum(p.numel() for p in m.parameters(recurse=False))
                )
                for m, xe, ye, _ in calls
            )
            out.append(
                UnitInfo(
                    unit.index,
                    unit.name,
                    unit.kind,
                    params,
                    nbytes,
                    in_shape,
                    out_shape,
                    sum(lf.x_elems + lf.y_elems for lf in leaves),
                    sum(c[3] for c in calls),
                    leaves,
                )  # fmt: skip
            )
    return out
