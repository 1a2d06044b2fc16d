"""Chunked unit kernels (specification §6.7): a Linear or Conv layer's forward, weight
gradient and update (and so mcPipe's materialisation of the newest weight) by output-row /
output-channel chunks of at most ``c`` weight elements.

Unchunked, mcPipe's forward clones a whole unit's weights and replays its pending pairs onto
the clone (a transient of one unit's weights plus a weight gradient, which eats most of the
resident saving at small windows). Chunked, the forward asks the store for one chunk of rows
at a time (PipeDream and GreedyUpdates slice the version they keep; mcPipe clones that chunk
of its base and replays the pending pairs' errors restricted to those rows), so the transient
is one chunk of weights plus one chunk of gradient. Every schedule runs the same chunk
kernels (the chunk size is a run-level setting), so mcPipe stays bit-identical to PipeDream;
chunked results are numerically close to, not bitwise equal to, unchunked ones.

The forward is a custom autograd Function: it saves nothing (the layer input is kept as the
call's pair by the executor), and its backward fetches the weight the microbatch used from the
store (the base under mcPipe's FIFO order, resident anyway) to compute the input error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from edgetrain.pipeline.kernels import sgd_step

FLOAT = 4
_CONV: dict[type[nn.Module], int] = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}
_CONV_FWD: dict[int, Callable[..., torch.Tensor]] = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_WEIGHT: dict[int, Callable[..., torch.Tensor]] = {
    1: torch.nn.grad.conv1d_weight,  # type: ignore[attr-defined]
    2: torch.nn.grad.conv2d_weight,  # type: ignore[attr-defined]
    3: torch.nn.grad.conv3d_weight,  # type: ignore[attr-defined]
}
_CONV_INPUT: dict[int, Callable[..., torch.Tensor]] = {
    1: torch.nn.grad.conv1d_input,  # type: ignore[attr-defined]
    2: torch.nn.grad.conv2d_input,  # type: ignore[attr-defined]
    3: torch.nn.grad.conv3d_input,  # type: ignore[attr-defined]
}

Rows = slice
# (weight rows, bias rows or None) of one chunk
Chunk = tuple[torch.Tensor, torch.Tensor | None]


def chunk_elems(mib: float | None) -> int:
    """Weight elements (float32) per chunk for ``chunk_mib``; 0 (off) for None or 0."""
    if not mib:
        return 0
    return max(1, int(mib * 2**20) // FLOAT)


def chunkable(module: nn.Module) -> bool:
    """Does this layer run chunked kernels: a Linear, or a zero-padded ungrouped ConvNd?"""
    kind = type(module)
    if kind is nn.Linear:
        return True
    if kind in _CONV:
        conv = module
        assert isinstance(conv, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
        return conv.groups == 1 and conv.padding_mode == "zeros"
    return False


def row_chunks(shape: Sequence[int], c: int) -> list[Rows]:
    """Output rows (channels) per chunk: as many whole rows as fit in ``c`` elements, at
    least one."""
    rows = shape[0]
    per_row = 1
    for d in shape[1:]:
        per_row *= int(d)
    k = max(1, c // max(1, per_row))
    return [slice(i, min(i + k, rows)) for i in range(0, rows, k)]


def _rows_of(module: nn.Module, delta: torch.Tensor, rows: Rows) -> torch.Tensor:
    """The output error restricted to the chunk's rows (channels)."""
    if type(module) is nn.Linear:
        return delta.reshape(-1, delta.shape[-1])[:, rows]
    return delta[:, rows]


def _x2(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1]) if type(module) is nn.Linear else x


def chunk_grad(
    module: nn.Module, x: torch.Tensor, delta: torch.Tensor, w_shape: Sequence[int], rows: Rows
) -> tuple[torch.Tensor, torch.Tensor]:
    """One call's weight and bias gradient restricted to the chunk's rows."""
    d = _rows_of(module, delta, rows)
    if type(module) is nn.Linear:
        return torch.mm(d.t(), _x2(module, x)), d.sum(0)
    conv = module
    assert isinstance(conv, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
    shape = (rows.stop - rows.start, *w_shape[1:])
    g = _CONV_WEIGHT[_CONV[type(conv)]](x, shape, d, conv.stride, conv.padding, conv.dilation, 1)
    return g, d.sum(dim=[k for k in range(d.dim()) if k != 1])


def step_chunk(
    module: nn.Module,
    calls: Sequence[tuple[torch.Tensor, torch.Tensor]],
    src: Chunk,
    dst: Chunk,
    rows: Rows,
    lr: float,
    momentum: float,
    weight_decay: float,
    fused: bool,
    buf: Chunk | None = None,
    hold: Callable[[int], Any] | None = None,
) -> None:
    """One chunk of a layer's SGD step by its calls' (input, error) pairs, ``src`` into
    ``dst`` (the same tensors for an in-place step). ``fused`` (a Linear under plain SGD): one
    ``addmm`` per call, no gradient tensor; else the chunk's gradient summed over calls and
    :func:`~edgetrain.pipeline.kernels.sgd_step`. Every schedule steps every chunk through
    here, so a chunk replayed by mcPipe equals the rows of PipeDream's version bit for bit.
    ``hold(nbytes)``: the accountant's block for the gradient temporary."""
    (sw, sb), (dw, db) = src, dst
    in_place = sw is dw
    if fused:
        first = True
        for x, delta in calls:
            d = _rows_of(module, delta, rows)
            x2 = _x2(module, x)
            if first and not in_place:
                torch.addmm(sw, d.t(), x2, alpha=-lr, out=dw)
                if sb is not None and db is not None:
                    torch.add(sb, d.sum(0), alpha=-lr, out=db)
            else:
                dw.addmm_(d.t(), x2, alpha=-lr)
                if db is not None:
                    db.add_(d.sum(0), alpha=-lr)
            first = False
        if first and not in_place:  # no call reached the layer: unchanged
            dw.copy_(sw)
            if sb is not None and db is not None:
                db.copy_(sb)
        return
    gw: torch.Tensor | None = None
    gb: torch.Tensor | None = None
    for x, delta in calls:
        a, b = chunk_grad(module, x, delta, _full_shape(module), rows)
        gw = a if gw is None else gw + a
        gb = b if gb is None else gb + b
    if gw is None:
        gw = torch.zeros_like(sw)
        gb = torch.zeros_like(sb) if sb is not None else None
    ctx = hold(gw.numel() * gw.element_size()) if hold is not None else None
    if ctx is not None:
        ctx.__enter__()
    try:
        bw, bb = buf if buf is not None else (None, None)
        sgd_step(sw, gw, lr, momentum, weight_decay, bw, None if in_place else dw)
        if sb is not None and gb is not None:
            sgd_step(sb, gb, lr, momentum, weight_decay, bb, None if in_place else db)
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)


def _full_shape(module: nn.Module) -> tuple[int, ...]:
    w = module._parameters["weight"]
    assert w is not None
    return tuple(w.shape)


def chunk_forward(
    module: nn.Module, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None
) -> torch.Tensor:
    """The layer's output restricted to the chunk's rows (channels)."""
    if type(module) is nn.Linear:
        return F.linear(x, w, b)
    conv = module
    assert isinstance(conv, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
    return _CONV_FWD[_CONV[type(conv)]](x, w, b, conv.stride, conv.padding, conv.dilation, 1)


def input_error(
    module: nn.Module, x_shape: torch.Size, w: torch.Tensor, gy: torch.Tensor
) -> torch.Tensor:
    """The error at the layer input from the error at its output, with the whole weight."""
    if type(module) is nn.Linear:
        return gy.matmul(w)
    conv = module
    assert isinstance(conv, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
    return _CONV_INPUT[_CONV[type(conv)]](
        x_shape, w, gy, conv.stride, conv.padding, conv.dilation, 1
    )


class ChunkSource(Protocol):
    """What :class:`ChunkedLayer` asks of the stage's weight store: a chunk's weights for a
    forward, the whole weight for the backward."""

    def chunk(self, u: int, li: int, v: int, rows: Rows) -> Chunk: ...

    def whole(self, u: int, li: int, v: int) -> torch.Tensor: ...


class ChunkedLayer(torch.autograd.Function):
    """A chunked Linear/Conv forward; its backward gives the input error only (the weight
    gradient comes from the call's pair, as in every schedule)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        module: nn.Module,
        source: ChunkSource,
        where: tuple[int, int, int],
        chunks: Sequence[Rows],
    ) -> torch.Tensor:
        u, leaf, v = where
        outs = []
        for rows in chunks:
            w, b = source.chunk(u, leaf, v, rows)
            outs.append(chunk_forward(module, x, w, b))
            del w, b
        ctx.module, ctx.source, ctx.where, ctx.x_shape = module, source, where, x.shape
        dim = -1 if type(module) is nn.Linear else 1
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=dim)

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Any:
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        u, leaf, v = ctx.where
        w = ctx.source.whole(u, leaf, v)
        return input_error(ctx.module, ctx.x_shape, w, gy), None, None, None, None
