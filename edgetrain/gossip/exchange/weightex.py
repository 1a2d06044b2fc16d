"""DLion's weight exchange (gossip.md B.5): when, whom and how much. Pure.

The paper's findings (Figs. 4 and 5) without its rules; the rules are the specification's
(ours): at a WE point the **best** worker (lowest smoothed training loss, which every gradient
message carries) sends its weights to the **worst** (highest loss); ties go to the lower id.
``whom = "all"``: every worker sends to every other, which then averages all. ``when``: every
``every`` iterations throughout (``periodic``), only while pi < ``early_until`` (``early``, the
default), only from ``late_from`` on (``late``), or ``none``. ``what = "partial"``: only the
``fraction`` of entries that changed most since the sender's last exchange.
The receiver merges w <- (1 - beta) w + beta mean(received).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch

When = Literal["none", "periodic", "early", "late"]


def due(t: int, pi: float, when: When, every: int, early_until: float, late_from: float) -> bool:
    """Whether iteration ``t`` (0-based) ends with a weight exchange."""
    if when == "none" or every < 1 or (t + 1) % every != 0:
        return False
    if when == "early":
        return pi < early_until
    if when == "late":
        return pi >= late_from
    return True


def best_and_worst(losses: Mapping[int, float]) -> tuple[int, int] | None:
    """(lowest-loss worker, highest-loss worker), ties to the lower id; None when fewer than
    two workers have a loss."""
    known = sorted((w, v) for w, v in losses.items() if v == v)  # NaN left out
    if len(known) < 2:
        return None
    best = min(known, key=lambda wv: (wv[1], wv[0]))[0]
    worst = min(known, key=lambda wv: (-wv[1], wv[0]))[0]
    return (best, worst) if best != worst else None


def largest_changes(delta: torch.Tensor, fraction: float) -> torch.Tensor:
    """Sorted indices of the ``fraction`` of entries with the largest |delta| (at least one)."""
    k = max(1, min(delta.numel(), round(fraction * delta.numel())))
    return torch.topk(delta.abs(), k, sorted=False).indices.sort().values


@torch.no_grad()
def merge(local: torch.Tensor, received: torch.Tensor, beta: float) -> None:
    """``local <- (1 - beta) local + beta received`` in place."""
    local.mul_(1.0 - beta).add_(received, alpha=beta)


class LossEwma:
    """A training loss smoothed over about ``window`` iterations (alpha = 2 / (window + 1))."""

    def __init__(self, window: int) -> None:
        self.alpha = 2.0 / (window + 1.0)
        self.value: float | None = None

    def update(self, loss: float) -> float:
        self.value = loss if self.value is None else self.value + self.alpha * (loss - self.value)
        return self.value
