"""A CPU twin of modules built on the meta device, for the forward passes that only measure
shapes.

A forward pass on the meta device decomposes through ``torch._refs``, whose first use imports
``torch._dynamo`` and the symbolic-shape machinery: about a second on a small CPU, on every
``advise`` and ``plan``. A copy whose parameters and buffers are allocated, uninitialised, on
the CPU gives the same shapes without that import; its values are garbage and never read.
Models whose parameters and buffers pass :data:`TWIN_MAX_BYTES` stay on the meta device."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import TypeVar

import torch
from torch import nn

TWIN_MAX_BYTES = 256 << 20  # an uninitialised CPU copy up to this size beats the meta import

T = TypeVar("T")


def _tensors(module: nn.Module) -> Iterable[torch.Tensor]:
    yield from module.parameters()
    yield from module.buffers()


def needs_twin(modules: Iterable[nn.Module]) -> bool:
    """True where any tensor of ``modules`` is on the meta device and all of them together fit
    in :data:`TWIN_MAX_BYTES`."""
    meta, nbytes = False, 0
    for module in modules:
        for t in _tensors(module):
            meta = meta or t.is_meta
            nbytes += t.numel() * t.element_size()
    return meta and nbytes <= TWIN_MAX_BYTES


def cpu_twin(obj: T) -> T:
    """A deep copy of ``obj`` (a module, or anything holding modules: a list of units) whose
    modules have uninitialised CPU tensors in place of meta ones. One ``deepcopy`` keeps
    modules shared inside ``obj`` shared in the copy."""
    memo: dict[int, object] = {}
    twin = copy.deepcopy(obj, memo)
    for copied in memo.values():  # every object the copy made, each once
        if isinstance(copied, nn.Module):
            _allocate(copied)
    return twin


def _allocate(m: nn.Module) -> None:
    # torch.empty, not Module.to_empty: empty_like of a meta tensor takes the refs path too
    for name, p in m._parameters.items():
        if p is not None and p.is_meta:
            fresh = torch.empty(p.shape, dtype=p.dtype, device="cpu")
            m._parameters[name] = nn.Parameter(fresh, requires_grad=p.requires_grad)
    for name, b in m._buffers.items():
        if b is not None and b.is_meta:
            m._buffers[name] = torch.empty(b.shape, dtype=b.dtype, device="cpu")
