"""The memory formulas of a stage (specification §7.3) and the paper's Theorem 1. Pure.

Sizes in bytes of float32 (4 per element). For stage s holding P_s parameters with m_s
microbatches in flight, microbatch b, and per-sample pair size a_u = sum over the unit's layer
calls of (input + output elements):

- PipeDream keeps m_s versions: ``m_s * P_s``;
- GreedyUpdates (and Local, data-parallel) one copy: ``P_s``;
- mcPipe a base plus m_s - 1 pending updates of pairs: ``P_s + (m_s - 1) * b * sum_u a_u``;
- mcPipe-auto per unit the smaller of the two;

plus, with momentum, one buffer per weight copy the optimiser steps (the newest, or mcPipe's
base). The paper's bound ``Omega/N + 2(m-1) sqrt(Omega/N)`` is the special case of one square
layer per stage, b = 1 and an equal split; it is reported beside the general one, never instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

FLOAT = 4


@dataclass(frozen=True)
class UnitSize:
    """What the formulas need of one unit: parameters and per-sample pair elements."""

    params: int
    pair_elems: int


def resident(
    store: str,
    m: int,
    units: Sequence[UnitSize],
    microbatch: int,
    momentum: bool = False,
    modes: Sequence[str] | None = None,
) -> int:
    """Resident weight (+ pairs, + optimiser state) bytes of a stage under ``store``:
    ``versions`` (PipeDream), ``latest`` (Greedy, Local, DP), ``pairs`` (mcPipe), ``auto``
    (mcPipe-auto), or per-unit ``modes``."""
    total = 0
    for k, u in enumerate(units):
        mode = modes[k] if modes is not None else store
        if mode == "auto":
            versions = m * u.params
            pairs = u.params + (m - 1) * microbatch * u.pair_elems
            mode = "pairs" if pairs < versions else "versions"
        if mode == "versions":
            total += m * u.params
        elif mode == "latest":
            total += u.params
        elif mode == "pairs":
            total += u.params + (m - 1) * microbatch * u.pair_elems
        else:
            raise ValueError(f"unknown store {mode!r}")
        if momentum:
            total += u.params
    return total * FLOAT


def transient(
    store: str,
    units: Sequence[UnitSize],
    momentum: bool = False,
    fused: bool = False,
    chunk: int = 0,
) -> int:
    """The largest temporary on top of the resident bytes during an operation: a
    weight-gradient (none for ``fused`` Linear steps under plain SGD), and for mcPipe the
    weight being replayed (and its momentum). Unchunked kernels (``chunk`` 0) hold a whole
    unit's; chunked ones (``chunk`` weight elements, Linear/Conv units) one chunk of each, so
    at most ``2c`` for every schedule under plain SGD (``3c`` for mcPipe with momentum)."""
    biggest = max((u.params for u in units), default=0)
    if chunk > 0:
        biggest = min(biggest, chunk)
    grad = 0 if fused else biggest
    if store in ("pairs", "auto"):
        return (1 + int(momentum)) * biggest * FLOAT + grad * FLOAT
    return grad * FLOAT


def paper_bound(omega: int, n: int, m: int) -> float:
    """Theorem 1's mcPipe bound per worker, ``Omega/N + 2(m-1) sqrt(Omega/N)``, in bytes."""
    share = omega / n
    return (share + 2 * (m - 1) * math.sqrt(share)) * FLOAT


def paper_stash(omega: int, n: int, m: int) -> float:
    """Theorem 1's stashing figure per worker, ``m Omega/N``, in bytes."""
    return m * omega / n * FLOAT
