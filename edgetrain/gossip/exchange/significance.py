"""Gaia's significance filter (Hsieh et al., NSDI'17, as gossip.md B.8 recalls it). Pure.

A parameter server keeps, per parameter, the update accumulated since it last sent that entry.
An entry is *significant* when the change it would make is large against the weight:
|eta acc_i / k| > v |w_i| (v = 1% by default; ``sqrt-epoch``: v / sqrt(epoch), the lowering
over time Gaia describes; constants recalled, not checked against the Gaia paper). Significant
entries are sent (as a sparse payload) and leave the accumulator; the others stay until they
become significant, so accumulator + everything sent = every update ever added. Unlike DLion's
threshold it ignores the bandwidth: how much goes out depends on the model only.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from edgetrain.gossip.exchange.sparse import Payload, to_float32

Decay = Literal["none", "sqrt-epoch"]


def threshold_at(v: float, epoch: int, decay: Decay) -> float:
    """The significance threshold in ``epoch`` (1-based)."""
    return v / math.sqrt(max(1, epoch)) if decay == "sqrt-epoch" else v


def significant(acc: torch.Tensor, weights: torch.Tensor, step: float, v: float) -> torch.Tensor:
    """The mask of entries whose change ``step * acc`` exceeds ``v`` times |w| (a zero
    weight: any change at all)."""
    return (step * acc).abs() > v * weights.abs()


class Accumulator:
    """Updates not yet significant enough to send, per parameter."""

    def __init__(self, n: int, dtype: torch.dtype = torch.float32, device: str = "cpu") -> None:
        self.acc = torch.zeros(n, dtype=dtype, device=device)

    def add(self, g: torch.Tensor) -> None:
        self.acc.add_(g)

    def take(self, weights: torch.Tensor, step: float, v: float) -> Payload:
        """The significant entries (sparse), removed from the accumulator."""
        mask = significant(self.acc, weights, step, v)
        idx = mask.nonzero().flatten()
        vals, lost = to_float32(self.acc[idx])
        self.acc[idx] = lost
        n = int(self.acc.numel())
        return Payload("sparse", n, vals, idx.to(torch.int32).cpu().numpy().copy())
