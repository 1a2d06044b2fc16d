"""The weight stores of a stage: which weights a microbatch's forward and backward get, and how
an update lands (specification §0.1, §5.2, §6).

One stage store serves every schedule; per unit it keeps its weights one of three ways:

- ``versions`` (PipeDream): every version an in-flight microbatch still needs, plus the newest.
  A microbatch's backward gets the version its forward used; the update is computed from that
  microbatch's pairs and applied to the newest. A version nobody needs any more is freed, and
  its buffer takes the next version when one is needed.
- ``latest`` (GreedyUpdates, Local, data-parallel): one copy, updated in place; forward and
  backward both get it as it is at that moment.
- ``pairs`` (mcPipe): one base version plus, per update not yet folded in, the (layer input,
  output error) pair of every parametric layer call. A forward materialises the newest version
  on demand (a clone of the base with the pending pairs replayed, in order, by the shared
  :func:`~edgetrain.pipeline.kernels.weight_grad`) and drops it; under the fixed FIFO order
  the microbatch being back-propagated always used the base itself. After each backward the
  updates no in-flight microbatch needs are folded into the base and their pairs freed.

Every update of a unit goes through one function: :func:`fused_sgd` for a unit of Linear
layers under plain SGD (the weight-gradient GEMM and the step in one ``addmm``, with no gradient
tensor to allocate: replaying a pending update costs about one weight gradient), else
:func:`~edgetrain.pipeline.kernels.sgd_step` on gradients from the shared
:func:`~edgetrain.pipeline.kernels.weight_grad`; so ``pairs`` reproduces ``versions`` bit for
bit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from edgetrain.pipeline.accounting import Accountant, Timers, storage_bytes
from edgetrain.pipeline.chain import Unit
from edgetrain.pipeline.chunked import Chunk, Rows, chunkable, row_chunks, step_chunk
from edgetrain.pipeline.kernels import Grads, sgd_step, weight_grad
from edgetrain.pipeline.lowrank import correct

Weights = dict[str, torch.Tensor]
MODES = ("versions", "latest", "pairs")


@dataclass(frozen=True)
class Hyper:
    """The SGD settings every update uses."""

    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0


@dataclass
class LeafCall:
    """One call of a parametric layer in a microbatch: its input, and (after the backward) the
    error at its output. ``leaf`` indexes :attr:`Unit.leaves`."""

    leaf: int
    x: torch.Tensor
    delta: torch.Tensor | None = None


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


@torch.no_grad()
def unit_grads(unit: Unit, calls: Sequence[LeafCall], weights: Mapping[str, torch.Tensor]) -> Grads:
    """The unit's parameter gradients (unit-local names) from its layer calls, summed over calls
    in call order; a layer that was not called (or got no error) gets zeros."""
    return _unit_grads(unit, calls, weights)


def _unit_grads(
    unit: Unit, calls: Sequence[LeafCall], weights: Mapping[str, torch.Tensor]
) -> Grads:
    grads: Grads = {}
    for call in calls:
        leaf = unit.leaves[call.leaf]
        if call.delta is None:
            continue
        keys = leaf.keys()
        # a Linear's gradient is a formula of its pair alone: it needs no weights
        own = None if type(leaf.module) is nn.Linear else {n: weights[k] for n, k in keys.items()}
        for name, g in weight_grad(leaf.module, call.x, call.delta, own).items():
            key = keys.get(name) or _join(leaf.local, name)
            grads[key] = g if key not in grads else grads[key] + g
    for name, w in weights.items():
        if name not in grads:
            grads[name] = torch.zeros_like(w)
    return grads


def fusable(unit: Unit, hyper: Hyper) -> bool:
    """Can the unit's plain SGD step go through :func:`fused_sgd` (every layer a Linear, no
    momentum, no weight decay)?"""
    plain = not hyper.momentum and not hyper.weight_decay
    return plain and bool(unit.leaves) and all(type(lf.module) is nn.Linear for lf in unit.leaves)


@torch.no_grad()
def fused_sgd(
    unit: Unit,
    calls: Sequence[LeafCall],
    src: Mapping[str, torch.Tensor],
    lr: float,
    out: Mapping[str, torch.Tensor] | None = None,
) -> Weights:
    """``src - lr * dW`` for a unit of Linear layers, one ``addmm`` per layer call (the
    weight-gradient GEMM and the step in one kernel, no gradient tensor), into ``out`` (None:
    ``src`` in place), calls in call order. In place and into ``out`` give the same bits, so
    every store that steps through here (PipeDream's new version, GreedyUpdates' copy, mcPipe's
    replay and fold) computes the same weights."""
    return _fused_sgd(unit, calls, src, lr, out)


def _fused_sgd(
    unit: Unit,
    calls: Sequence[LeafCall],
    src: Mapping[str, torch.Tensor],
    lr: float,
    out: Mapping[str, torch.Tensor] | None = None,
) -> Weights:
    dst = dict(src) if out is None else dict(out)
    done: set[str] = set()  # names already stepped into dst (a later call steps dst again)
    for call in calls:
        if call.delta is None:
            continue
        leaf = unit.leaves[call.leaf]
        d2 = call.delta.reshape(-1, call.delta.shape[-1])
        x2 = call.x.reshape(-1, call.x.shape[-1])
        wname = _join(leaf.local, "weight")
        base = dst[wname] if wname in done else src[wname]
        if dst[wname] is base:
            base.addmm_(d2.t(), x2, alpha=-lr)
        else:
            torch.addmm(base, d2.t(), x2, alpha=-lr, out=dst[wname])
        done.add(wname)
        bname = _join(leaf.local, "bias")
        if bname in src:
            base = dst[bname] if bname in done else src[bname]
            if dst[bname] is base:
                base.add_(d2.sum(0), alpha=-lr)
            else:
                torch.add(base, d2.sum(0), alpha=-lr, out=dst[bname])
            done.add(bname)
    for name, t in src.items():  # a layer no call reached: unchanged
        if name not in done and dst[name] is not t:
            dst[name].copy_(t)
    return dst


def _nbytes(ts: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


@dataclass
class _Pending:
    """One update not yet folded into the base: its learning rate and pairs per pairs-unit."""

    lr: float
    calls: dict[int, list[LeafCall]]

    def tensors(self) -> list[torch.Tensor]:
        out: list[torch.Tensor] = []
        for calls in self.calls.values():
            for c in calls:
                out.append(c.x)
                if c.delta is not None:
                    out.append(c.delta)
        return out


@dataclass
class _UnitState:
    """What one unit holds: ``versions`` {version: weights} (one entry for latest and pairs,
    the newest or the base), and the momentum buffer (newest's, or the base's)."""

    mode: str
    versions: dict[int, Weights]
    momentum: Weights | None = None

    def tensors(self) -> list[torch.Tensor]:
        out = [t for w in self.versions.values() for t in w.values()]
        if self.momentum is not None:
            out += list(self.momentum.values())
        return out


class StageStore:
    """The weights of one stage's units, per unit ``versions``, ``latest`` or ``pairs``."""

    def __init__(
        self,
        units: Sequence[Unit],
        init: Sequence[Mapping[str, torch.Tensor]],
        modes: Sequence[str],
        hyper: Hyper,
        accountant: Accountant | None = None,
        timers: Timers | None = None,
        version: int = 0,
        momentum: Sequence[Mapping[str, torch.Tensor] | None] | None = None,
        chunk: int = 0,
        lowrank: bool = False,
        keep_rebuilt: bool = False,
    ) -> None:
        """``chunk``: weight elements per chunk of the chunked unit kernels
        (:mod:`edgetrain.pipeline.chunked`; 0: off), used by every mode alike. ``lowrank``:
        the Linear layers of ``pairs`` units under plain SGD forward through the low-rank
        replay (:mod:`edgetrain.pipeline.lowrank`) instead of materialising their newest
        weight (those layers are not chunked). ``keep_rebuilt``: a ``pairs`` unit rebuilds
        its newest weights for each forward into one buffer it keeps between forwards,
        instead of new tensors each time (a fresh weight-sized allocation page-faults its
        memory in again: on the CPU it cost as much as the replay's arithmetic). The buffer is
        the same transient the accountant counts during the rebuild; the process keeps it
        between forwards, so leave it off where RSS must follow the store (memory runs)."""
        if not (len(units) == len(init) == len(modes)):
            raise ValueError("units, initial weights and modes must have one entry per unit")
        for m in modes:
            if m not in MODES:
                raise ValueError(f"unknown store mode {m!r}; use one of {', '.join(MODES)}")
        self.units = list(units)
        self.modes = list(modes)
        self.hyper = hyper
        self.acc = accountant or Accountant()
        self.timers = timers or Timers()
        self.latest = version
        self.base = version  # pairs units: the version their base holds
        self.in_flight: Counter[int] = Counter()
        self.pending: list[_Pending] = []
        self.state: list[_UnitState] = []
        self.fused = [fusable(unit, hyper) for unit in self.units]
        # latest weights are stepped in place: the store then always holds the same tensors
        self.in_place = all(m == "latest" for m in modes)
        self._resident: int | None = None  # resident_bytes, until the held tensors change
        # keep_rebuilt: per unit, the buffers (weights, momentum) a forward's rebuild reuses
        self.keep_rebuilt = keep_rebuilt
        self._rebuilt: list[tuple[Weights, Weights | None] | None] = [None] * len(self.units)
        for u, (weights, mode) in enumerate(zip(init, modes, strict=True)):
            w = {n: t.detach().clone().contiguous() for n, t in weights.items()}
            buf = None
            if hyper.momentum:
                given = momentum[u] if momentum is not None else None
                buf = (
                    {n: given[n].detach().clone() for n in w}
                    if given is not None
                    else {n: torch.zeros_like(t) for n, t in w.items()}
                )
            self.state.append(_UnitState(mode, {version: w}, buf))
        # a unit's weights, and its gradients (the same shapes): what a step holds on top
        self._unit_bytes = [_nbytes(st.versions[version].values()) for st in self.state]
        # chunked kernels: per unit, {leaf index: its row chunks} for its Linear/Conv layers,
        # and the unit-local names of those layers' parameters
        self.chunk_elems = chunk
        self.chunks: list[dict[int, list[Rows]]] = []
        self._chunk_keys: list[frozenset[str]] = []
        # low-rank replay: per unit, the leaves that forward through it
        self.lowrank: list[frozenset[int]] = []
        self._own_keys: list[frozenset[str]] = []
        for unit, st in zip(self.units, self.state, strict=True):
            w = st.versions[version]
            low = frozenset(
                li
                for li, leaf in enumerate(unit.leaves)
                if lowrank and st.mode == "pairs" and fusable(unit, hyper)
                and leaf.keys().get("weight") in w
            )  # fmt: skip
            per: dict[int, list[Rows]] = {}
            if chunk > 0:
                for li, leaf in enumerate(unit.leaves):
                    wkey = leaf.keys().get("weight")
                    if chunkable(leaf.module) and wkey in w and li not in low:
                        per[li] = row_chunks(w[wkey].shape, chunk)
            self.chunks.append(per)
            self.lowrank.append(low)
            self._chunk_keys.append(
                frozenset(k for li in per for k in unit.leaves[li].keys().values())
            )
            # the layers whose forward reads their weights another way (chunks, low rank)
            self._own_keys.append(
                frozenset(k for li in (*per, *low) for k in unit.leaves[li].keys().values())
            )

    # ------------------------------------------------------------------ forward / backward

    def begin_forward(self) -> int:
        """A microbatch enters the stage: it uses the newest version."""
        v = self.latest
        self.in_flight[v] += 1
        return v

    def _kept(self, u: int, v: int) -> Weights | None:
        """Unit ``u``'s weights for version ``v`` where its store keeps them whole (the newest
        for ``latest``, ``v`` itself for ``versions``); None for ``pairs``."""
        st = self.state[u]
        if st.mode == "latest":
            return st.versions[self.latest]
        if st.mode == "versions":
            return st.versions[v]
        return None

    def forward_weights(self, u: int, v: int) -> Weights:
        """Unit ``u``'s weights of version ``v`` for a forward (materialised for pairs)."""
        kept = self._kept(u, v)
        if kept is not None:
            return kept
        st = self.state[u]
        if v == self.base:
            return st.versions[self.base]
        if self.chunks[u] or self.lowrank[u]:  # those layers read their weights themselves
            return self._materialise_rest(u, v)
        with self.timers.time("replay_s"):
            return self._materialise(u, v, reuse=True)

    # ------------------------------------------------------------------ chunked kernels

    def _chunk_views(self, u: int, li: int, w: Mapping[str, torch.Tensor], rows: Rows) -> Chunk:
        keys = self.units[u].leaves[li].keys()
        b = keys.get("bias")
        return w[keys["weight"]][rows], (w[b][rows] if b is not None and b in w else None)

    def chunk(self, u: int, li: int, v: int, rows: Rows) -> Chunk:
        """The rows ``rows`` of layer ``li`` of unit ``u`` at version ``v`` for a chunked
        forward: views of the weights a ``versions``/``latest`` unit keeps (or of mcPipe's
        base); for a newer version of a ``pairs`` unit, that chunk of the base cloned and the
        pending updates replayed onto it (the transient: one chunk, plus one chunk of
        gradient)."""
        kept = self._kept(u, v)
        if kept is not None:
            return self._chunk_views(u, li, kept, rows)
        st = self.state[u]
        base = st.versions[self.base]
        if v == self.base:
            return self._chunk_views(u, li, base, rows)
        with self.timers.time("replay_s"), torch.no_grad():
            bw, bb = self._chunk_views(u, li, base, rows)
            w = (bw.clone(), bb.clone() if bb is not None else None)
            buf: Chunk | None = None
            size = _nbytes(t for t in w if t is not None)
            if st.momentum is not None:
                mw, mb = self._chunk_views(u, li, st.momentum, rows)
                buf = (mw.clone(), mb.clone() if mb is not None else None)
                size *= 2
            module = self.units[u].leaves[li].module
            h = self.hyper
            with self.acc.hold(size):
                for entry in self.pending[: v - self.base]:
                    pairs = [(c.x, c.delta) for c in entry.calls[u] if c.leaf == li]
                    step_chunk(
                        module, [(x, d) for x, d in pairs if d is not None], w, w, rows,
                        entry.lr, h.momentum, h.weight_decay, self.fused[u], buf, self.acc.hold,
                    )  # fmt: skip
            return w

    def lowrank_forward(self, u: int, li: int, v: int, x: torch.Tensor) -> torch.Tensor:
        """Layer ``li`` of unit ``u`` (a Linear of a ``pairs`` unit) applied to ``x`` at
        version ``v``: the base's output corrected by the pending updates' pairs
        (:func:`~edgetrain.pipeline.lowrank.lowrank_linear`), no weight formed. The
        correction is mcPipe's replay, timed as ``replay_s``."""
        keys = self.units[u].leaves[li].keys()
        base = self.state[u].versions[self.base]
        w, b = base[keys["weight"]], base.get(keys.get("bias", ""))
        if v == self.base:
            return F.linear(x, w, b)
        terms = [
            (entry.lr, c.x, c.delta)
            for entry in self.pending[: v - self.base]
            for c in entry.calls[u]
            if c.leaf == li and c.delta is not None
        ]
        rows = x.numel() // max(1, x.shape[-1])
        # the transient: one (rows x rows kept) product at a time
        held = max((rows * (xk.numel() // max(1, xk.shape[-1])) for _, xk, _ in terms), default=0)
        y = F.linear(x, w, b)  # the forward itself; the correction is the replay
        with self.timers.time("replay_s"), self.acc.hold(held * x.element_size()):
            return correct(y, x, terms, bias=b is not None)

    def whole(self, u: int, li: int, v: int) -> torch.Tensor:
        """Layer ``li``'s whole weight for the backward of a microbatch that used ``v``."""
        keys = self.units[u].leaves[li].keys()
        return self.backward_weights(u, v)[keys["weight"]]

    def _materialise_rest(self, u: int, v: int) -> Weights:
        """Unit ``u``'s weights for a chunked forward at version ``v`` of a ``pairs`` unit:
        the layers that are not chunked materialised (if any), the chunked ones' base tensors
        as placeholders (their forward reads its rows through :meth:`chunk`)."""
        st = self.state[u]
        base = st.versions[self.base]
        ckeys = self._own_keys[u]
        if all(k in ckeys for k in base):
            return base
        with self.timers.time("replay_s"), torch.no_grad():
            rest = [n for n in base if n not in ckeys]
            w = {n: base[n].clone() for n in rest}
            buf = {n: st.momentum[n].clone() for n in rest} if st.momentum is not None else None
            size = _nbytes(w.values()) * (2 if buf is not None else 1)
            own = {*self.chunks[u], *self.lowrank[u]}
            with self.acc.hold(size):
                for entry in self.pending[: v - self.base]:
                    others = [c for c in entry.calls[u] if c.leaf not in own]
                    g = _unit_grads(self.units[u], others, w)
                    with self.acc.hold(_nbytes(g.values())):
                        self._apply(w, g, entry.lr, buf)
        return {n: w.get(n, t) for n, t in base.items()}

    def _step_chunked(
        self,
        u: int,
        calls: Sequence[LeafCall],
        at: Mapping[str, torch.Tensor],
        src: Weights,
        lr: float,
        buf: Weights | None,
        out: Weights | None,
    ) -> Weights:
        """Unit ``u``'s step with chunked kernels for its chunked layers (chunk by chunk,
        through :func:`~edgetrain.pipeline.chunked.step_chunk`) and the usual step for the
        rest of its parameters."""
        h = self.hyper
        unit, per, ckeys = self.units[u], self.chunks[u], self._chunk_keys[u]
        dst = src if out is None else out
        for li, chunks in per.items():
            module = unit.leaves[li].module
            pairs = [(c.x, c.delta) for c in calls if c.leaf == li and c.delta is not None]
            for rows in chunks:
                s_ = self._chunk_views(u, li, src, rows)
                d_ = s_ if out is None else self._chunk_views(u, li, dst, rows)
                b_ = self._chunk_views(u, li, buf, rows) if buf is not None else None
                step_chunk(
                    module, pairs, s_, d_, rows, lr, h.momentum, h.weight_decay,
                    self.fused[u], b_, self.acc.hold,
                )  # fmt: skip
        rest = [n for n in src if n not in ckeys]
        if rest:
            others = [c for c in calls if c.leaf not in per]
            g = _unit_grads(unit, others, {n: at[n] for n in rest})
            with self.acc.hold(_nbytes(g.values())):
                self._apply(
                    {n: src[n] for n in rest}, g, lr,
                    {n: buf[n] for n in rest} if buf is not None else None,
                    {n: dst[n] for n in rest} if out is not None else None,
                )  # fmt: skip
        return dict(dst)

    def backward_weights(self, u: int, v: int) -> Weights:
        """Unit ``u``'s weights for the backward of a microbatch that used version ``v``."""
        kept = self._kept(u, v)
        if kept is not None:
            return kept
        if v != self.base:
            raise RuntimeError(
                f"pairs store: a backward of version {v} while the base is {self.base} "
                "(the stage left its FIFO order)"
            )
        return self.state[u].versions[self.base]

    def end_backward(self, v: int, calls: Sequence[Sequence[LeafCall]]) -> None:
        """A microbatch that used version ``v`` finished its backward: apply its update."""
        if self.in_flight[v] <= 0:
            raise RuntimeError(f"a backward of version {v}, which no microbatch in flight used")
        self.in_flight[v] -= 1
        if not self.in_flight[v]:
            del self.in_flight[v]
        needed = set(self.in_flight)
        lr = self.hyper.lr
        with self.timers.time("update_s"), torch.no_grad():
            for u, st in enumerate(self.state):
                if st.mode == "versions":
                    self._step_versions(u, v, calls[u], needed)
                elif st.mode == "latest":
                    w = st.versions[self.latest]
                    self._step(u, calls[u], w, w, lr, st.momentum)
                    st.versions = {self.latest + 1: w}
            if "pairs" in self.modes:
                self._pairs_update(lr, calls, needed)
        if not self.in_place:
            self._resident = None
        self.latest += 1

    def release(self, v: int) -> None:
        """A microbatch that used version ``v`` leaves without an update of its own (data
        parallelism reduces first, then :meth:`apply_grads`)."""
        if self.in_flight[v] <= 0:
            raise RuntimeError(f"a release of version {v}, which no microbatch in flight used")
        self.in_flight[v] -= 1
        if not self.in_flight[v]:
            del self.in_flight[v]

    def apply_grads(self, grads: Sequence[Mapping[str, torch.Tensor]]) -> None:
        """Apply given gradients to every (``latest``) unit: data parallelism's step."""
        with self.timers.time("update_s"), torch.no_grad():
            for u, st in enumerate(self.state):
                if st.mode != "latest":
                    raise RuntimeError("apply_grads needs a store of latest weights")
                w = st.versions[self.latest]
                self._apply(w, grads[u], self.hyper.lr, st.momentum)
                st.versions = {self.latest + 1: w}
        self.latest += 1

    # ------------------------------------------------------------------ helpers

    def _step(
        self,
        u: int,
        calls: Sequence[LeafCall],
        at: Mapping[str, torch.Tensor],
        src: Weights,
        lr: float,
        buf: Weights | None,
        out: Weights | None = None,
    ) -> Weights:
        """Unit ``u``'s ``src`` stepped by its calls' gradients (taken at weights ``at``, which
        only the generic fallback reads) into ``out`` (None: in place): fused for Linear units
        under plain SGD, else the shared weight gradient and :func:`sgd_step`; chunk by chunk
        with chunked kernels. Its callers (an update, a replay) hold ``torch.no_grad()``,
        entered once for all their units."""
        if self.chunks[u]:
            return self._step_chunked(u, calls, at, src, lr, buf, out)
        if self.fused[u]:
            return _fused_sgd(self.units[u], calls, src, lr, out)
        g = self._grads(u, calls, at)
        with self.acc.hold(self._unit_bytes[u]):
            return self._apply(src, g, lr, buf, out)

    def _grads(self, u: int, calls: Sequence[LeafCall], w: Mapping[str, torch.Tensor]) -> Grads:
        with self.acc.hold(self._unit_bytes[u]):
            return _unit_grads(self.units[u], calls, w)

    def _apply(
        self,
        w: Mapping[str, torch.Tensor],
        g: Mapping[str, torch.Tensor],
        lr: float,
        buf: Weights | None,
        out: Weights | None = None,
    ) -> Weights:
        h = self.hyper
        result = {}
        for n, t in w.items():
            result[n] = sgd_step(  # the callers hold no_grad
                t,
                g[n],
                lr,
                h.momentum,
                h.weight_decay,
                buf[n] if buf is not None else None,
                out[n] if out is not None else None,
            )
        return result

    def _step_versions(self, u: int, v: int, calls: Sequence[LeafCall], needed: set[int]) -> None:
        st = self.state[u]
        newest = st.versions[self.latest]
        at, lr = st.versions[v], self.hyper.lr
        if self.latest not in needed:  # nobody reads the newest: step it in place
            self._step(u, calls, at, newest, lr, st.momentum)
            del st.versions[self.latest]
            st.versions[self.latest + 1] = newest
        else:  # a new version, in the buffer of one nobody needs if there is one
            free = [k for k in st.versions if k not in needed and k != self.latest]
            out = st.versions.pop(free[0]) if free else None
            if out is None:
                out = {n: torch.empty_like(t) for n, t in newest.items()}
            with self.acc.hold(_nbytes(out.values()) if not free else 0):
                st.versions[self.latest + 1] = self._step(
                    u, calls, at, newest, lr, st.momentum, out
                )
        for k in [k for k in st.versions if k not in needed and k != self.latest + 1]:
            del st.versions[k]

    def _pairs_update(
        self, lr: float, calls: Sequence[Sequence[LeafCall]], needed: set[int]
    ) -> None:
        target = min(needed) if needed else self.latest + 1
        while self.base < target and self.pending:
            self._fold(self.pending.pop(0))
        entry = _Pending(lr, {u: list(calls[u]) for u, m in enumerate(self.modes) if m == "pairs"})
        if self.base < target:  # nothing pending and nobody needs the base: fold at once
            self._fold(entry)
        else:
            self.pending.append(entry)

    def _fold(self, entry: _Pending) -> None:
        """Fold the oldest pending update into the base, in place; its pairs are freed."""
        for u, calls in entry.calls.items():
            st = self.state[u]
            base = st.versions.pop(self.base)
            self._step(u, calls, base, base, entry.lr, st.momentum)
            st.versions[self.base + 1] = base
        self.base += 1

    def _materialise(self, u: int, v: int, reuse: bool = False) -> Weights:
        """Unit ``u`` at version ``v`` > base: the pending pairs replayed onto the base, the
        first one stepping the base into a new tensor (no copy of the base first: a step into
        ``out`` and in place give the same bits), the others in place. ``reuse`` (a forward's
        weights, dropped before the next): into the unit's kept buffer where the store keeps
        one (``keep_rebuilt``), else into new tensors."""
        st = self.state[u]
        base = st.versions[self.base]
        kept = self._rebuilt[u] if reuse and self.keep_rebuilt else None
        if kept is None:
            w = {n: torch.empty_like(t) for n, t in base.items()}
            mom = st.momentum
            buf = {n: torch.empty_like(t) for n, t in mom.items()} if mom is not None else None
            if reuse and self.keep_rebuilt:
                self._rebuilt[u] = kept = (w, buf)
        else:
            w, buf = kept
        if buf is not None and st.momentum is not None:
            for n, t in st.momentum.items():
                buf[n].copy_(t)
        size = _nbytes(w.values()) + (_nbytes(buf.values()) if buf is not None else 0)
        with self.acc.hold(size), torch.no_grad():
            for k, entry in enumerate(self.pending[: v - self.base]):
                if k == 0:
                    self._step(u, entry.calls[u], base, base, entry.lr, buf, w)
                else:
                    self._step(u, entry.calls[u], w, w, entry.lr, buf)
        return w

    # ------------------------------------------------------------------ whole state

    def newest(self, u: int) -> Weights:
        """Unit ``u``'s newest weights (materialised for pairs; the store's own tensors
        otherwise: copy before the next update)."""
        st = self.state[u]
        if st.mode == "pairs":
            return (
                self._materialise(u, self.latest)
                if self.latest != self.base
                else (st.versions[self.base])
            )
        return st.versions[self.latest]

    def momentum_of(self, u: int) -> Weights | None:
        """Unit ``u``'s momentum buffer at its newest version (None without momentum). Only
        meaningful when nothing is in flight (then every mode is at the newest version)."""
        return self.state[u].momentum

    def idle(self) -> bool:
        """True when no microbatch is in flight and nothing is pending (after a drain)."""
        return not self.in_flight and not self.pending

    def tensors(self) -> list[torch.Tensor]:
        out = [t for st in self.state for t in st.tensors()]
        for entry in self.pending:
            out += entry.tensors()
        return out

    def resident_bytes(self) -> int:
        """Bytes of the distinct storages the store holds (counted again after an update
        that changed which tensors it holds; a store of latest weights steps them in place)."""
        if self._resident is None:
            self._resident = storage_bytes(self.tensors())
        return self._resident

    def versions_held(self) -> int:
        """The most weight versions any unit holds now (diagnostic)."""
        return max((len(st.versions) for st in self.state), default=0)


@dataclass
class StoreChoice:
    """How a technique keeps each unit: ``modes[u]`` and why (for the report)."""

    modes: list[str]
    reasons: dict[int, str] = field(default_factory=dict)
