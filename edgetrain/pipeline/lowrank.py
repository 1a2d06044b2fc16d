"""mcPipe's low-rank replay (``[pipeline] replay = "lowrank"``, specification §6.7): a Linear
layer's forward with the newest weight, without forming it.

Under plain SGD the newest weight of a pair-stored Linear is its base minus the pending
updates, each ``lr_k * d_kᵀ x_k`` (the layer input ``x_k`` and output error ``d_k`` that
update kept). So for a layer input ``x``

    y = x W_bᵀ + b_b - Σ_k lr_k ((x x_kᵀ) d_k + Σ_rows d_k)

costs ``b * b_k * (in + out)`` multiply-accumulates per pending update instead of the
``b * in * out`` of replaying its weight gradient (64 times fewer for a 2048 x 2048 layer at
b = 16), and holds no transient weight. The sums are reordered, so the output is close to the
sequential replay's, not bitwise equal: mcPipe with low-rank replay is not bit-identical to
PipeDream (the default, ``"sequential"``, is). The backward is unchanged: under the stage's
FIFO order the microbatch being back-propagated used the base, which the store holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
import torch.nn.functional as F

# one pending update's term: (its learning rate, the layer input, the output error)
Term = tuple[float, torch.Tensor, torch.Tensor]


def lowrank_linear(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, terms: Sequence[Term]
) -> torch.Tensor:
    """``x`` through a Linear layer whose weight is ``w`` (and bias ``b``) stepped by the
    pending ``terms`` of plain SGD, computed without forming the stepped weight. Call it
    without autograd (the forward of :class:`LowRankLayer`)."""
    y = F.linear(x, w, b)
    return correct(y, x, terms, bias=b is not None)


def correct(y: torch.Tensor, x: torch.Tensor, terms: Sequence[Term], bias: bool) -> torch.Tensor:
    """The base's output ``y`` (of input ``x``) corrected in place by the pending ``terms``:
    the replay itself (``bias``: the layer has one, stepped by the errors' sums)."""
    if not terms:
        return y
    out = y.shape[-1]
    y2 = y.reshape(-1, out)
    x2 = x.reshape(-1, x.shape[-1])
    for lr, xk, dk in terms:
        xk2 = xk.reshape(-1, xk.shape[-1])
        dk2 = dk.reshape(-1, dk.shape[-1])
        y2.addmm_(torch.mm(x2, xk2.t()), dk2, alpha=-lr)
        if bias:
            y2.sub_(dk2.sum(0), alpha=lr)
    return y2.reshape(y.shape)


def lowrank_macs(rows: int, rows_k: int, in_features: int, out_features: int) -> int:
    """Multiply-accumulates of one pending update's term for ``rows`` input rows and the
    ``rows_k`` rows its pair kept: ``rows * rows_k * (in + out)``."""
    return rows * rows_k * (in_features + out_features)


def replay_factor(microbatch: int, leaves: Sequence[tuple[str, int, int, int]]) -> float:
    """A unit's low-rank replay over its sequential replay, by multiply-accumulates: per
    pending update ``b * (in + out)`` per call against ``in * out`` per call, summed over its
    ``(kind, x_elems, y_elems, params)`` leaves; 1 where a leaf is not a Linear (its replay
    stays sequential) or the unit has no parameters."""
    low = full = 0
    for kind, x, y, params in leaves:
        if kind != "Linear":
            return 1.0
        if params:  # per sample row: its term against the b rows a pair kept, and dW's row
            low += lowrank_macs(1, microbatch, x, y)
            full += x * y
    return min(1.0, low / full) if full else 1.0


def unit_factors(microbatch: int, infos: Sequence[Any]) -> tuple[float, ...]:
    """:func:`replay_factor` of each unit of a unit table (``UnitInfo`` rows)."""
    return tuple(
        replay_factor(microbatch, [(lf.kind, lf.x_elems, lf.y_elems, lf.params) for lf in u.leaves])
        for u in infos
    )


class LowRankSource(Protocol):
    """What :class:`LowRankLayer` asks of the stage's weight store."""

    def lowrank_forward(self, u: int, li: int, v: int, x: torch.Tensor) -> torch.Tensor: ...

    def whole(self, u: int, li: int, v: int) -> torch.Tensor: ...


class LowRankLayer(torch.autograd.Function):
    """A Linear forward at version ``v`` through the store's low-rank replay; its backward gives
    the input error only (the weight gradient comes from the call's pair, as in every
    schedule), with the weight the microbatch used (the base)."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, source: LowRankSource, where: tuple[int, int, int]
    ) -> torch.Tensor:
        u, leaf, v = where
        ctx.source, ctx.where = source, where
        return source.lowrank_forward(u, leaf, v, x)

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Any:
        if not ctx.needs_input_grad[0]:
            return None, None, None
        u, leaf, v = ctx.where
        w = ctx.source.whole(u, leaf, v)
        return gy.matmul(w), None, None


__all__ = [
    "LowRankLayer",
    "correct",
    "lowrank_linear",
    "lowrank_macs",
    "replay_factor",
    "unit_factors",
]
