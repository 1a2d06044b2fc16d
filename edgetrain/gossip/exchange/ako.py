"""Ako, as DLion's baseline (gossip.md B.8): partitioned gradient exchange.

Same data, learning rate, batch size b0, optimiser and synchronisation as DLion; no batching,
no weight exchange, no adaptive LR/BS. Each iteration a worker applies its own gradient and
everything received, and sends every peer one of p partitions of the sum of its last p
gradients (:mod:`.partitions`), p from the smallest bandwidth between the
workers (the WAN when there are sites, else the LAN) and one iteration's compute time, as
DLion's paper set it up. The public TF.AKO sums the updates and uses Adam; here the update is
DLion's (1/k)-scaled step with the recipe's optimiser, so only the exchange differs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch

from edgetrain.gossip.config import AkoSection
from edgetrain.gossip.exchange.bandwidth import MBIT
from edgetrain.gossip.exchange.loop import Decentral
from edgetrain.gossip.exchange.partitions import Window, partition_count
from edgetrain.gossip.exchange.side import exchange_side
from edgetrain.runtime.base import WorkerContext


class Ako(Decentral):
    """One Ako worker (role ``trainer``)."""

    model = AkoSection

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(ctx)
        self.cfg = AkoSection.of(ctx.recipe)
        self.window: Window | None = None
        self.t_iter = 0.0

    def begin(self, plan: Mapping[str, Any]) -> None:
        cfg = self.cfg
        t_iter = plan.get("t_iter")
        self.t_iter = float(t_iter) if isinstance(t_iter, (int, float)) and t_iter > 0 else 0.1
        several = len({s or "" for s in self.sites.values()}) > 1
        bottleneck = (cfg.wan_mbit if several else cfg.lan_mbit) * MBIT
        p = cfg.partitions or partition_count(
            len(self.ids), self.flat.nbytes, bottleneck, self.t_iter, self.flat.n
        )
        self.window = Window(self.flat.n, min(p, self.flat.n))

    def iteration(self, t: int, g: torch.Tensor, epoch: int) -> None:
        assert self.window is not None
        started = time.perf_counter()
        with self.cpu.part("select"):
            self.window.push(t, g)
            payload = self.window.take(t)
        for q in self.peers:
            self.send_grad(q, t, payload)
        self.times["exchange_s"] += time.perf_counter() - started
        self.wait_for_gradients(t, self.peers)
        self.update(g, t)

    def extra_metrics(self) -> dict[str, Any]:
        return {"partitions": self.window.p if self.window else None, "t_iter": self.t_iter}


# The launcher side (see :mod:`.side`).
SIDE = exchange_side(AkoSection, "Ako")
