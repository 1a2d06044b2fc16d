"""DLion's adaptive learning rate and batch size (gossip.md B.4, Table 1 of the paper). Pure.

The paper names the policies (WarmUpLR, LargeLR, DecayLR, SpeedUpBS, IncreaseBS) but gives no
formula or switch point; the rules below are the specification's proposals (ours). Every rule
is a deterministic function of the progress pi = samples processed by the whole cluster /
(planned epochs x training-set size), so every worker switches at the same iteration without
a message:

- SmallLR: eta. LargeLR: k eta from the start. WarmUpLR: eta (1 + (k - 1) pi / pi_w) until
  pi_w, then k eta (linear per iteration).
- DecayLR: from pi_d on, the learning rate above times gamma (once).
- StaticBS: the planned batch sizes. SpeedUpBS: from pi_s on, every m_j times beta_s.
  IncreaseBS: times beta_i at each of pi = 0.25, 0.50, 0.75 (cumulative).
- A batch increase keeps the workers' ratios and never takes the total above T_bs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from edgetrain.gossip.exchange.batching import apportion

LrPolicy = Literal["small", "large", "warmup"]
BsPolicy = Literal["static", "speedup", "increase"]


@dataclass(frozen=True)
class Schedule:
    """The learning-rate and batch-size policies of one run (k workers)."""

    workers: int
    lr_policy: LrPolicy = "warmup"
    warmup_until: float = 0.10
    decay: bool = True
    decay_at: float = 0.80
    decay_factor: float = 0.1
    bs_policy: BsPolicy = "speedup"
    speedup_at: float = 0.70
    speedup_factor: float = 2.0
    increase_at: tuple[float, ...] = (0.25, 0.50, 0.75)
    increase_factor: float = 1.5

    def lr_factor(self, pi: float) -> float:
        """eta_t / eta at progress ``pi``."""
        k = float(self.workers)
        if self.lr_policy == "small":
            f = 1.0
        elif self.lr_policy == "large" or pi >= self.warmup_until:
            f = k
        else:
            f = 1.0 + (k - 1.0) * pi / self.warmup_until
        if self.decay and pi >= self.decay_at:
            f *= self.decay_factor
        return f

    def batch_factor(self, pi: float) -> float:
        """The factor on every planned batch size at ``pi`` (before the T_bs cap)."""
        if self.bs_policy == "speedup":
            return self.speedup_factor if pi >= self.speedup_at else 1.0
        if self.bs_policy == "increase":
            steps = sum(1 for at in self.increase_at if pi >= at)
            return float(self.increase_factor**steps)
        return 1.0

    def batches(self, pi: float, base: Sequence[int], t_bs: int | None) -> tuple[int, ...]:
        """Every worker's batch size at ``pi``: the planned ones scaled, ratios kept, the total
        at most ``t_bs`` (but never below the planned total)."""
        factor = self.batch_factor(pi)
        if factor == 1.0:
            return tuple(base)
        total = sum(base)
        target = round(total * factor)
        if t_bs is not None:
            target = min(target, t_bs)
        if target <= total:
            return tuple(base)
        return apportion(target, [float(m) for m in base])


def progress(samples: int, epochs: int, n_train: int) -> float:
    """pi: the share of the planned samples (epochs x training set) processed so far."""
    planned = max(1, epochs * n_train)
    return min(1.0, samples / planned)


class LossGuard:
    """Stops a raised learning rate that makes the loss climb (ours: the paper has no such
    rule; a warm-up to k eta on a small model can diverge).

    While the schedule's factor is above 1 (a warm-up, LargeLR), it watches this worker's
    smoothed loss. When the loss rises ``rise`` (a share) above the lowest it has seen, at least
    ``patience`` iterations after the lowest, the factor is capped: at the one in effect at the
    lowest loss where the factor has risen since, else at half the factor now (never below 1).
    Each worker guards its own learning rate. Pure: feed it every iteration's factor and
    smoothed loss."""

    def __init__(self, rise: float = 0.10, patience: int = 10) -> None:
        self.rise = rise
        self.patience = patience
        self.cap: float | None = None
        self.trips: list[tuple[int, float]] = []  # (iteration, the cap it set)
        self._best: tuple[float, float, int] | None = None  # (loss, factor, iteration)

    def factor(self, t: int, scheduled: float, loss: float | None) -> float:
        """The factor to use at iteration ``t``: ``scheduled`` under the cap."""
        f = scheduled if self.cap is None else min(scheduled, self.cap)
        if loss is None or scheduled <= 1.0 or loss != loss:  # NaN: nothing to learn from
            return f
        best = self._best
        if best is None or loss < best[0]:
            self._best = (loss, f, t)
        elif loss > best[0] * (1.0 + self.rise) and t - best[2] >= self.patience:
            self.cap = max(1.0, best[1] if best[1] < f else f / 2.0)
            self.trips.append((t, self.cap))
            self._best = (loss, self.cap, t)  # the climb starts a new watch from here
            f = min(scheduled, self.cap)
        return f
