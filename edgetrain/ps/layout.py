"""The model as the parameter-server family sees it: layers (the planner's layer specs), their
tensors and bytes, and which shard holds each tensor. Trainers and shards build it alike."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from edgetrain.models.layers import LayerSpec, layer_specs
from edgetrain.ps.sharding import layout_hash, shard


@dataclass(frozen=True)
class Layout:
    """Layers in forward order, the tensors of each, and the shard of every tensor."""

    specs: tuple[LayerSpec, ...]
    shapes: dict[str, tuple[int, ...]]
    owner: dict[str, int]  # tensor -> shard index
    servers: int
    digest: str

    @property
    def layer_bytes(self) -> list[int]:
        return [s.param_bytes for s in self.specs]

    def tensors(self, first: int, last: int) -> list[str]:
        """The tensors of layers ``first``..``last`` (1-based, inclusive), in model order."""
        return [p for s in self.specs[first - 1 : last] for p in s.params]

    def by_server(self, names: list[str]) -> dict[int, list[str]]:
        """``names`` grouped by the shard that holds them (shards in index order)."""
        out: dict[int, list[str]] = {}
        for n in names:
            out.setdefault(self.owner[n], []).append(n)
        return dict(sorted(out.items()))

    def owned(self, server: int) -> list[str]:
        return [n for n in self.shapes if self.owner[n] == server]


def build_layout(model: nn.Module, input_shape: tuple[int, int, int], servers: int) -> Layout:
    """The layout of ``model`` over ``servers`` shards."""
    specs = tuple(layer_specs(model, input_shape))
    params = dict(model.named_parameters())
    shapes = {n: tuple(params[n].shape) for s in specs for n in s.params}
    sizes = [(n, params[n].numel() * params[n].element_size()) for n in shapes]
    owner = shard(sizes, servers)
    return Layout(specs, shapes, owner, servers, layout_hash(owner, shapes))


def buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """Floating-point state that is not a parameter (BatchNorm statistics): stays on trainers."""
    params = {n for n, _ in model.named_parameters()}
    return {
        k: v for k, v in model.state_dict().items() if k not in params and v.is_floating_point()
    }
