"""Gaia, as DLion's baseline (gossip.md B.8): significance-filtered updates, bandwidth-blind.

Same data, learning rate, batch size b0, optimiser and synchronisation as DLion; no
capacity-aware batching, no weight exchange, no adaptive LR/BS. Two deployments, as DLion's
paper ran it:

- ``worker`` (one LAN, DLion §4.1): every worker is its own site and parameter server: it
  applies its own gradient, adds it to its accumulator, sends every peer the significant
  entries (:mod:`.significance`) and applies theirs;
- ``site`` (several sites, §4.2): a parameter server per site, in the site's first worker
  (the paper had 4 servers, so it shares that host): the site's workers push full gradients to
  it over the LAN; it sums them, adds them to its accumulator, exchanges significant entries
  with the other sites' servers over the WAN and waits for theirs (a mirror clock of bound 0:
  Gaia waits for the WAN delivery), steps, and every worker of the site pulls the weights back.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch

from edgetrain.comm.wire import Message
from edgetrain.gossip.config import GaiaSection
from edgetrain.gossip.exchange.bandwidth import members
from edgetrain.gossip.exchange.loop import Decentral
from edgetrain.gossip.exchange.messages import GRAD, WEIGHTS, Header
from edgetrain.gossip.exchange.side import exchange_side
from edgetrain.gossip.exchange.significance import Accumulator, threshold_at
from edgetrain.gossip.exchange.sparse import Payload, to_float32
from edgetrain.runtime.base import WorkerContext


class Gaia(Decentral):
    """One Gaia worker (role ``trainer``), its site's parameter server if it is the first."""

    model = GaiaSection

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(ctx)
        self.cfg = GaiaSection.of(ctx.recipe)
        self.mode = "worker"
        self.leader = ctx.worker_id
        self.site_members: list[int] = []
        self.leaders: list[int] = []
        self.acc: Accumulator | None = None
        self.site_sum: torch.Tensor | None = None
        self.sent_entries = 0
        self.sends = 0

    def begin(self, plan: Mapping[str, Any]) -> None:
        groups = members(self.sites, [self.me, *self.peers])
        mode = self.cfg.deployment
        if mode == "auto":
            several = len(groups) > 1 and any(len(ws) > 1 for ws in groups.values())
            mode = "site" if several else "worker"
        self.mode = mode
        if mode == "site":
            self.site_members = groups[self.site]
            self.leader = self.site_members[0]
            self.leaders = [ws[0] for _, ws in sorted(groups.items())]
        self.acc = Accumulator(self.flat.n, device=str(self.device))
        self.site_sum = torch.zeros(self.flat.n, device=self.device)

    def _significant(self, g: torch.Tensor, epoch: int) -> Payload:
        assert self.acc is not None
        self.acc.add(g)
        v = threshold_at(self.cfg.significance, epoch, self.cfg.significance_decay)
        payload = self.acc.take(self.flat.weights(), self.lr_now / self.k, v)
        self.sent_entries += payload.entries
        self.sends += 1
        return payload

    def iteration(self, t: int, g: torch.Tensor, epoch: int) -> None:
        if self.mode == "site":
            self._site_iteration(t, g, epoch)
            return
        started = time.perf_counter()
        with self.cpu.part("select"):
            payload = self._significant(g, epoch)
        for q in self.peers:
            self.send_grad(q, t, payload)
        self.times["exchange_s"] += time.perf_counter() - started
        self.wait_for_gradients(t, self.peers)
        self.update(g, t)

    def _site_iteration(self, t: int, g: torch.Tensor, epoch: int) -> None:
        if self.me != self.leader:
            vals, _ = to_float32(g)
            self.send_grad(self.leader, t, Payload("dense", self.flat.n, vals))
            self.await_keys([(WEIGHTS, self.leader, t)], t)  # the pull: always synchronous
            return
        assert self.site_sum is not None
        self.await_keys([(GRAD, q, t) for q in self.site_members], t)
        site = g.add_(self.site_sum)
        self.site_sum.zero_()
        started = time.perf_counter()
        with self.cpu.part("select"):
            payload = self._significant(site, epoch)
        others = [w for w in self.leaders if w != self.me and w not in self.failed]
        for q in others:
            self.send_grad(q, t, payload)
        self.times["exchange_s"] += time.perf_counter() - started
        self.wait_for_gradients(t, others)
        self.update(site, t)
        vals, _ = to_float32(self.flat.weights())
        weights = Payload("dense", self.flat.n, vals)
        for q in self.site_members:
            if q != self.me and q not in self.failed:
                self.deliver(q, self.message(WEIGHTS, t, {"role": "site"}, weights))

    def received(self, sender: int, head: Header, payload: Payload, msg: Message) -> None:
        to_site = self.mode == "site" and sender in self.site_members
        assert self.site_sum is not None
        if to_site:
            payload.add_into(self.site_sum)
        else:
            self.add_inbound(head.t, payload)

    def received_weights(self, sender: int, head: Header, payload: Payload, msg: Message) -> None:
        if self.mode == "site" and sender == self.leader and payload.kind == "dense":
            self.flat.load(torch.from_numpy(payload.values.copy()).to(self.device))
        else:
            self.counts["unexpected_weights"] += 1

    def extra_metrics(self) -> dict[str, Any]:
        n = self.flat.n
        return {
            "deployment": self.mode,
            "parameter_server": self.leader if self.mode == "site" else self.me,
            "significant_share": self.sent_entries / (self.sends * n) if self.sends else None,
        }


# The launcher side (see :mod:`.side`).
SIDE = exchange_side(GaiaSection, "Gaia")
