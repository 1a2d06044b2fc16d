"""The stage executor: one stage's forward and backward of a microbatch, the same code for
every schedule (specification §5.5).

Forward runs the stage's units in order, each parametric module with the weights the store
hands out for the microbatch's version (:mod:`edgetrain.pipeline.swap`). Autograd would keep
every weight it used inside the graph, which would turn mcPipe into stashing and stop
GreedyUpdates from updating its one copy in place: a saved-tensor hook swaps each saved weight
(or view of one) for a token (unit, name, version, view geometry) that resolves through the
store at backward time, and running statistics are passed through untouched. A forward hook on
each parametric layer (run by the executor itself right after a unit that is one layer)
records the call's input and marks its output, whose error the backward returns beside the
stage input's (from the output's gradient edge; a torch without that gets a tensor hook);
those (input, error) pairs are what every store's update is made of. Weights never require
grad: the backward computes errors only (dI), and the weight gradients come from the shared
:func:`~edgetrain.pipeline.kernels.weight_grad`. The first stage's first layer output becomes a
leaf that requires grad, so its error is caught too. Dropout draws its mask from a generator
keyed by (seed, epoch, microbatch, unit): masks do not depend on the partition or schedule.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from edgetrain.pipeline.accounting import storage_bytes
from edgetrain.pipeline.chain import Unit
from edgetrain.pipeline.chunked import ChunkedLayer
from edgetrain.pipeline.lowrank import LowRankLayer
from edgetrain.pipeline.stores import LeafCall, StageStore
from edgetrain.pipeline.swap import call_with, param_slots


class Token(NamedTuple):  # a tuple: made for every saved weight, cheaper than a dataclass
    """A weight autograd saved, by reference: resolved through the store at backward time."""

    unit: int
    name: str
    version: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


class Live(NamedTuple):
    """A buffer autograd saved (running statistics): passed through as it is."""

    tensor: torch.Tensor


@dataclass
class Micro:
    """One microbatch in flight at this stage."""

    epoch: int
    j: int
    version: int
    inputs: list[torch.Tensor] = field(default_factory=list)
    out: torch.Tensor | None = None
    calls: list[list[LeafCall]] = field(default_factory=list)
    saved: dict[int, int] = field(default_factory=dict)  # storage -> bytes (activations)
    loss: float | None = None
    correct: int = 0
    edges: list[Any] = field(default_factory=list)  # layer outputs whose errors B captures
    caught: list[LeafCall] = field(default_factory=list)  # their calls, in the same order

    def keep(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        if storage.nbytes():
            self.saved[storage.data_ptr()] = storage.nbytes()


def dropout_seed(seed: int, epoch: int, j: int, unit: int) -> int:
    """The dropout generator's seed for unit ``unit`` of microbatch ``j`` of ``epoch``."""
    state = np.random.SeedSequence([seed, epoch, j, unit, 0xD50]).generate_state(1, np.uint64)
    return int(state[0] & np.uint64(2**62 - 1))


def no_inplace(units: Sequence[Unit]) -> None:
    """Turn off in-place activations (``ReLU(inplace=True)``): an in-place op on a tensor
    whose error is caught, or on a stage input, would break the capture. Same numbers."""
    for unit in units:
        for mod in unit.modules():
            for m in mod.modules():
                if getattr(m, "inplace", False) is True:
                    m.inplace = False  # type: ignore[assignment]


class StageExecutor:
    """Forward and backward of microbatches at one stage, in FIFO order."""

    def __init__(
        self,
        units: Sequence[Unit],
        store: StageStore,
        *,
        last: bool,
        seed: int = 0,
        first_unit: int | None = None,
    ) -> None:
        self.units = list(units)
        self.store = store
        self.last = last
        self.seed = seed
        self.first_unit = units[0].index if first_unit is None else first_unit
        self.flight: deque[Micro] = deque()
        self._micro: Micro | None = None
        self._unit: int | None = None
        self._weights: dict[int, str] = _NO_WEIGHTS  # storage ptr -> name, in a unit's call
        self._version = 0  # the version of the weights in ``_weights``
        # per unit: a store's dict of latest weights (stepped in place, so its storages stay)
        # and their storage map, computed once rather than at every forward
        self._maps: list[tuple[object, dict[int, str]]] = [(None, {}) for _ in self.units]
        self._buffers: AbstractSet[int] = _NO_BUFFERS
        self._stochastic = [unit.stochastic for unit in self.units]
        self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._slots = [param_slots(unit) for unit in self.units]
        self._buffer_mods = [
            [m for m in unit.module.modules() if m._buffers] for unit in self.units
        ]
        no_inplace(self.units)
        self._hooks = []
        # A unit that is one layer runs its hook itself after the call (the same arguments as
        # a registered forward hook gets), which keeps the module off torch's hook path.
        self._direct: list[Callable[..., Any] | None] = []
        for u, unit in enumerate(self.units):
            for mod in unit.modules():
                mod.train()
            one = len(unit.leaves) == 1 and unit.leaves[0].module is unit.module
            self._direct.append(self._leaf_hook(u, 0) if one else None)
            for li, leaf in enumerate(unit.leaves):
                if not one:
                    self._hooks.append(leaf.module.register_forward_hook(self._leaf_hook(u, li)))
        # chunked unit kernels (the store's run-level chunk size): the Linear/Conv layers it
        # chunks run their forward through the store's chunks, as an instance ``forward``
        # (``_replaced``: every layer whose forward this executor replaced)
        self._replaced: list[nn.Module] = []
        for u, per in enumerate(store.chunks):
            for li, rows in per.items():
                mod = self.units[u].leaves[li].module
                mod.forward = self._chunked_forward(u, li, mod, rows)
                self._replaced.append(mod)
        # low-rank replay: those Linear layers forward through the store's pairs
        for u, low in enumerate(store.lowrank):
            for li in sorted(low):
                mod = self.units[u].leaves[li].module
                mod.forward = self._lowrank_forward(u, li)
                self._replaced.append(mod)

    # ------------------------------------------------------------------ hooks

    def _chunked_forward(
        self, u: int, li: int, mod: nn.Module, rows: list[slice]
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        store = self.store

        def forward(x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = ChunkedLayer.apply(x, mod, store, (u, li, self._version), rows)
            return out

        return forward

    def _lowrank_forward(self, u: int, li: int) -> Callable[[torch.Tensor], torch.Tensor]:
        store = self.store

        def forward(x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = LowRankLayer.apply(x, store, (u, li, self._version))
            return out

        return forward

    def _leaf_hook(self, u: int, li: int) -> Callable[..., Any]:
        def hook(_mod: torch.nn.Module, inp: tuple[Any, ...], out: Any) -> Any:
            micro = self._micro
            if micro is None or not isinstance(out, torch.Tensor):
                return None
            x = inp[0].detach()
            call = LeafCall(li, x)
            micro.calls[u].append(call)
            storage = x.untyped_storage()  # micro.keep(x), inline: once per layer call
            if storage.nbytes():
                micro.saved[storage.data_ptr()] = storage.nbytes()
            if not out.requires_grad:  # the first layer of the first stage
                out = out.detach().requires_grad_(True)
                micro.inputs.append(out)
            if _EDGES:  # the backward returns this output's error with the stage input's
                micro.edges.append(get_gradient_edge(out))
                micro.caught.append(call)
                return out

            def catch(g: torch.Tensor, call: LeafCall = call) -> None:
                call.delta = g.detach()

            out.register_hook(catch)
            return out

        return hook

    def _pack(self, t: torch.Tensor) -> Any:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        nbytes = storage.nbytes()
        name = self._weights.get(ptr) if nbytes else None
        if name is not None and self._unit is not None:
            return Token(
                self._unit, name, self._version, tuple(t.size()), t.stride(),
                int(t.storage_offset()),
            )  # fmt: skip
        if ptr in self._buffers:
            return Live(t)
        if self._micro is not None and nbytes:  # Micro.keep, with the storage looked up once
            self._micro.saved[ptr] = nbytes
        return t

    def _unpack(self, packed: Any) -> torch.Tensor:
        if isinstance(packed, Token):
            w = self.store.backward_weights(packed.unit, packed.version)[packed.name]
            return w.as_strided(packed.size, packed.stride, packed.offset)
        if isinstance(packed, Live):
            return packed.tensor
        return packed  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ operations

    def forward(
        self,
        epoch: int,
        j: int,
        x: torch.Tensor,
        labels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """F_j: the stage's output activation (detached), or at the last stage the loss."""
        micro = Micro(epoch, j, self.store.begin_forward())
        micro.calls = [[] for _ in self.units]
        if self.first_unit > 0:  # the error at the stage input goes upstream
            x = x.detach().requires_grad_(True)
            micro.inputs.append(x)
        micro.keep(x)
        self._micro = micro
        try:
            with self._saved_hooks:  # one context object, entered once per forward
                h = x
                for u, unit in enumerate(self.units):
                    h = self._unit_forward(u, unit, micro, h)
                if self.last:
                    assert labels is not None, "the last stage needs the labels"
                    loss = F.cross_entropy(h, labels)
                    micro.out = loss
                    micro.loss = float(loss.detach())
                    micro.correct = int((h.detach().argmax(1) == labels).sum())
                else:
                    micro.out = h
        finally:
            self._micro = None
            self._unit = None
            self._weights = _NO_WEIGHTS
            self._buffers = _NO_BUFFERS
        self.flight.append(micro)
        return micro.out.detach()

    def _unit_forward(self, u: int, unit: Unit, micro: Micro, h: torch.Tensor) -> torch.Tensor:
        stochastic = self._stochastic[u]
        gen = torch.random.fork_rng(devices=[]) if stochastic else _NOTHING
        with gen:
            if stochastic:
                torch.manual_seed(dropout_seed(self.seed, micro.epoch, micro.j, unit.index))
            for m in unit.pre:
                h = m(h)
            weights = self.store.forward_weights(u, micro.version)
            self._unit, self._version = u, micro.version
            seen, names = self._maps[u]
            if seen is not weights:
                names = {t.untyped_storage().data_ptr(): n for n, t in weights.items()}
                if self.store.modes[u] == "latest":
                    self._maps[u] = (weights, names)
            self._weights = names
            mods = self._buffer_mods[u]
            self._buffers = (
                {
                    b.untyped_storage().data_ptr()
                    for m in mods
                    for b in m._buffers.values()
                    if b is not None and b.numel()
                }
                if mods
                else _NO_BUFFERS
            )
            out = call_with(unit.module, self._slots[u], weights, h)
            self._unit = None
            self._weights = _NO_WEIGHTS
            self._buffers = _NO_BUFFERS
            del weights
            hook = self._direct[u]
            if hook is not None:  # the unit's one layer: its forward hook, run here
                caught = hook(unit.module, (h,), out)
                out = out if caught is None else caught
            h = out
            for m in unit.post:
                h = m(h)
        return h

    def backward(self, grad: torch.Tensor | None = None) -> tuple[torch.Tensor | None, Micro]:
        """B of the oldest microbatch in flight: the error at the stage input (None at the
        first stage) and the microbatch, whose calls now hold their errors. The caller hands
        the calls to the store (:meth:`StageStore.end_backward`) or reduces them first."""
        micro = self.flight.popleft()
        assert micro.out is not None
        if not micro.inputs:
            raise RuntimeError("nothing to back-propagate to: no layer output requires grad")
        # With edges: the stage input (first), then the layer outputs whose errors the calls
        # want, the same errors a hook on each output catches, without a Python call per layer
        targets = (
            [*(micro.inputs[:1] if self.first_unit > 0 else []), *micro.edges]
            if micro.edges
            else micro.inputs
        )
        grads = torch.autograd.grad(
            micro.out, targets, None if self.last else grad, allow_unused=True
        )
        dx = grads[0] if self.first_unit > 0 else None
        for call, g in zip(micro.caught, grads[len(targets) - len(micro.edges) :], strict=True):
            call.delta = g.detach() if g is not None else None
        micro.out = None
        micro.inputs = []
        micro.edges = []
        micro.caught = []
        return (dx.detach() if dx is not None else None), micro

    def step(self, grad: torch.Tensor | None = None) -> tuple[torch.Tensor | None, Micro]:
        """B_j and the store's update from its pairs."""
        dx, micro = self.backward(grad)
        self.store.end_backward(micro.version, micro.calls)
        micro.calls = []
        return dx, micro

    # ------------------------------------------------------------------ accounting

    def activation_bytes(self) -> int:
        """Bytes autograd keeps for the microbatches in flight (inputs, saved tensors and the
        layer inputs that become pairs), per storage."""
        seen: dict[int, int] = {}
        for micro in self.flight:
            seen.update(micro.saved)
        return sum(seen.values())

    def sample(self) -> None:
        """Record the memory figures now (call between operations)."""
        self.store.acc.sample(self.store.resident_bytes(), self.activation_bytes())

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        for mod in self._replaced:  # the class's forward again
            mod.__dict__.pop("forward", None)
        self._replaced = []


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NOTHING = _Nothing()  # holds no state: one serves every deterministic unit


def _edges_work() -> bool:
    """Can ``torch.autograd.grad`` return the errors at gradient edges (probed once: recent
    torch can)? Else each layer output gets a hook that catches its error."""
    get = getattr(torch.autograd.graph, "get_gradient_edge", None)
    if get is None:
        return False
    try:
        with torch.enable_grad():  # whatever mode the importer is in
            x = torch.ones(2, requires_grad=True)
            y = x * 3.0
            (g,) = torch.autograd.grad((y * y).sum(), [get(y)])
    except (TypeError, RuntimeError):
        return False
    return g is not None and bool(torch.equal(g, 2 * y.detach()))


_EDGES = _edges_work()
get_gradient_edge: Callable[[torch.Tensor], Any] = getattr(
    torch.autograd.graph, "get_gradient_edge", lambda t: None
)
_NO_WEIGHTS: dict[int, str] = {}  # outside a unit's call (never written to)
_NO_BUFFERS: frozenset[int] = frozenset()


def unit_weights(units: Sequence[Unit]) -> list[dict[str, torch.Tensor]]:
    """Each unit's parameters (unit-local names), detached, as the store's starting weights."""
    return [{n: p.detach() for n, p in unit.module.named_parameters()} for unit in units]


def free_module_params(units: Sequence[Unit]) -> None:
    """Replace the units' own parameters by meta tensors of the same shape: the store holds
    the weights, the modules only their structure and buffers."""
    for unit in units:
        for mod in unit.module.modules():
            for name, p in list(mod.named_parameters(recurse=False)):
                meta = torch.nn.Parameter(torch.empty(p.shape, device="meta"), requires_grad=False)
                setattr(mod, name, meta)


def stored_bytes(tensors: Sequence[torch.Tensor]) -> int:
    return storage_bytes(tensors)
