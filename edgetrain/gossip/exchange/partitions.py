"""Ako's partitioned gradient exchange (Watcharapichat et al., SoCC'16; gossip.md B.8). Pure.

The flat gradient is cut into p contiguous, nearly equal slices. At iteration t a worker sends
every peer slice (t mod p) of the **sum of its last p gradients**, so each gradient reaches each
peer exactly once, at most p - 1 iterations late, and a link carries 1/p of the model per
iteration. p keeps the traffic within what the smallest link carries in one iteration (Ako's
principle: bandwidth use independent of the cluster size; the formula is the specification's):

    p = ceil((k - 1) S / (B t_iter))

with S the model's bytes, B the bottleneck bandwidth (the LAN on one site, the WAN between
sites, for every worker) and t_iter one iteration's compute time.
"""

from __future__ import annotations

import math
from collections import deque

import torch

from edgetrain.gossip.exchange.sparse import Payload, to_float32


def partition_count(
    workers: int, model_bytes: float, bottleneck_bps: float, t_iter: float, n: int
) -> int:
    """p, at least 1 and at most n (bandwidth in bytes per second)."""
    if workers <= 1 or model_bytes <= 0:
        return 1
    if bottleneck_bps <= 0 or t_iter <= 0:
        return max(1, n)
    p = math.ceil((workers - 1) * model_bytes / (bottleneck_bps * t_iter))
    return max(1, min(n, p))


def bounds(n: int, p: int) -> list[tuple[int, int]]:
    """p contiguous slices [start, stop) of n entries, sizes differing by at most one."""
    base, extra = divmod(n, p)
    out, start = [], 0
    for i in range(p):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


class Window:
    """The last p gradients; each iteration sends one slice of their sum."""

    def __init__(self, n: int, p: int) -> None:
        self.n, self.p = n, p
        self.slices = bounds(n, p)
        self.grads: deque[tuple[int, torch.Tensor]] = deque(maxlen=p)

    def push(self, t: int, g: torch.Tensor) -> None:
        """The gradient of iteration ``t`` (iterations are pushed in order)."""
        self.grads.append((t, g.detach().clone()))

    def take(self, t: int) -> Payload:
        """Slice (t mod p) of the sum of the gradients of iterations t - p + 1 .. t."""
        start, stop = self.slices[t % self.p]
        total: torch.Tensor | None = None
        for u, g in self.grads:
            if u > t - self.p:
                part = g[start:stop]
                total = part.clone() if total is None else total.add_(part)
        if total is None:
            total = torch.zeros(stop - start)
        vals, _ = to_float32(total)
        return Payload("slice", self.n, vals, None, start)

    def pending(self, t: int) -> torch.Tensor:
        """What the window still owes after iteration ``t``'s send: for every slice, the
        gradients whose part of that slice has not gone out yet (for tests)."""
        if not self.grads:
            return torch.zeros(self.n, dtype=torch.float64)
        out = torch.zeros(self.n, dtype=self.grads[0][1].dtype)
        for i, (start, stop) in enumerate(self.slices):
            # slice i is sent at iterations u' with u' mod p == i; a gradient u still owes it
            # when no such u' in [u, t] exists
            for u, g in self.grads:
                first = u + ((i - u) % self.p)
                if first > t:
                    out[start:stop] += g[start:stop]
        return out
