"""DLion (Hong & Chandra, HotCloud'19): decentralised training for heterogeneous micro-clouds.

Every worker keeps a replica and applies its own and its peers' gradients (Eq. 5; the shared
loop is :mod:`.loop`), with each of DLion's techniques switchable in
``[dlion]`` so that every ablation is a recipe option (gossip.md B.3-B.6; where the paper
gives no formula the specification's proposal is used, marked there as ours):

- **compute-capacity-aware batching**: the controller plans m_j from every worker's capacity
  curve (:mod:`.batching`) and sends it in the start directive;
- **adaptive learning rate and batch size** (:mod:`.schedules`);
- **network-aware gradient exchange**: per link a budget of ``budget_factor`` x T_unit x the
  link's bandwidth (estimated live from acknowledgements) decides how many entries go; the
  largest contributions go, the rest stays in the link's residual (:mod:`.sparse`); WAN links,
  slower, get fewer entries: a higher contribution threshold;
- **weight exchange**: at WE points the best worker's weights go to the worst (or everyone's to
  everyone), merged at the next iteration boundary or awaited (:mod:`.weightex`);
- **selective data propagation** (an extension: never evaluated in the paper): each iteration
  only sender sites send over the WAN, to receiver sites, and a receiving worker forwards to its
  site (:mod:`.selection`); unsent gradients stay in per-site residuals.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch

from edgetrain.comm.wire import Message
from edgetrain.gossip.config import DLionSection
from edgetrain.gossip.exchange.bandwidth import LAN, MBIT, Bandwidth, members, starting_bandwidth
from edgetrain.gossip.exchange.loop import Decentral, Sent
from edgetrain.gossip.exchange.messages import GRAD, WEIGHTS, Header, Key
from edgetrain.gossip.exchange.schedules import LossGuard, Schedule
from edgetrain.gossip.exchange.selection import choose_sites, default_count, wan_routes
from edgetrain.gossip.exchange.side import exchange_side
from edgetrain.gossip.exchange.sparse import (
    PROBE_EVERY,
    Payload,
    Residual,
    entries_for,
    sparse_pays,
    to_float32,
)
from edgetrain.gossip.exchange.weightex import LossEwma, best_and_worst, due, largest_changes
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import WorkerContext

SELECT_ALPHA = 0.3  # EWMA weight of the newest sparse take's time
Channel = int | tuple[str, str]  # a peer (one link) or ("site", name) (selective WAN)
Score = Callable[[torch.Tensor], torch.Tensor] | None


class DLion(Decentral):
    """One DLion worker (role ``trainer``)."""

    model = DLionSection

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(ctx)
        self.cfg = DLionSection.of(ctx.recipe)
        self.loss_ewma = LossEwma(self.cfg.loss_window)
        self.schedule = Schedule(len(ctx.recipe.expanded_workers()))
        self.residuals: dict[Channel, Residual] = {}
        self._dense: Payload | None = None  # see _dense_of
        self.bw: dict[int, Bandwidth] = {}
        self.t_unit = 0.0
        self.t_bs: int | None = None
        self.capacities: dict[int, float] = {}
        self.weights_in: list[Payload] = []
        self.snapshot: torch.Tensor | None = None
        self.guard = LossGuard(self.cfg.loss_guard_rise)
        self.we: dict[str, int] = {"sent": 0, "received": 0, "merges": 0, "bytes": 0}
        self.select_s: float | None = None  # a sparse take's time, EWMA (select_cost)

    # ------------------------------------------------------------------ the plan

    def begin(self, plan: Mapping[str, Any]) -> None:
        cfg = self.cfg
        self.schedule = Schedule(
            len(self.ids),
            cfg.lr_policy,
            cfg.warmup_until,
            cfg.decay_lr,
            cfg.decay_at,
            cfg.decay_factor,
            cfg.bs_policy,
            cfg.speedup_at,
            cfg.speedup_factor,
            tuple(cfg.increase_at),
            cfg.increase_factor,
        )
        t_bs = plan.get("t_bs")
        self.t_bs = t_bs if isinstance(t_bs, int) and t_bs >= sum(self.base) else None
        t_unit = plan.get("t_unit")
        ok = isinstance(t_unit, (int, float)) and 0 < t_unit < 3600
        self.t_unit = float(t_unit) if ok else 0.1  # type: ignore[arg-type]
        caps = plan.get("capacity_at_b0")
        if isinstance(caps, dict):
            self.capacities = {
                int(w): float(c)
                for w, c in caps.items()
                if str(w).isdigit() and isinstance(c, (int, float)) and c > 0
            }
        peers = self.peers
        start = starting_bandwidth(
            self.me,
            peers,
            self.sites,
            [self.me, *peers],
            cfg.lan_mbit * MBIT,
            cfg.wan_mbit * MBIT,
        )
        live = cfg.bandwidth == "live"
        self.bw = {q: Bandwidth(start[q], cfg.bandwidth_alpha, live) for q in peers}
        self.snapshot = self.flat.weights().clone()

    def batches_at(self, pi: float) -> tuple[int, ...]:
        return self.schedule.batches(pi, self.base, self.t_bs)

    def lr_factor(self, pi: float) -> float:
        scheduled = self.schedule.lr_factor(pi)
        if not self.cfg.loss_guard:
            return scheduled
        return self.guard.factor(self.t, scheduled, self.losses.get(self.me))

    @property
    def t_unit_now(self) -> float:
        """T_unit after the batch-size schedule (SpeedUpBS lengthens the step)."""
        return self.t_unit * sum(self.batches_now) / max(1, sum(self.base))

    # ------------------------------------------------------------------ gradient exchange

    @property
    def acks(self) -> bool:
        cfg = self.cfg
        return cfg.bandwidth == "live" and cfg.gradient_exchange == "partial"

    def entries(self, q: int) -> int | None:
        """Entries the link to ``q`` carries this iteration (None: dense)."""
        k = self.paper_entries(q)
        cfg = self.cfg
        if k is None or cfg.select_cost == "ignored" or cfg.threshold == "static":
            return k
        if self.select_s is None or self.t % PROBE_EVERY == 0:  # measure the selection (again)
            return k
        return k if sparse_pays(self.flat.n, k, self.bw[q].value, self.select_s) else None

    def paper_entries(self, q: int) -> int | None:
        """The paper's rule: the link's byte budget alone (None: dense)."""
        cfg, n = self.cfg, self.flat.n
        if cfg.gradient_exchange == "full":
            return None
        if cfg.threshold == "static":
            frac = cfg.lan_fraction if self.link(q) == LAN else cfg.wan_fraction
            k = max(1, round(frac * n))
            return None if 2 * k >= n else k
        return entries_for(cfg.budget_factor * self.t_unit_now * self.bw[q].value, n)

    def take(self, res: Residual, g: torch.Tensor | None, q: int, score: Score) -> Payload:
        """What the link to ``q`` carries now from ``res`` (with ``g`` added); a sparse take's
        time feeds the selection-cost estimate, and a link the cost made dense is counted."""
        with self.cpu.part("select"):
            return self._take(res, g, q, score)

    def _take(self, res: Residual, g: torch.Tensor | None, q: int, score: Score) -> Payload:
        k = self.entries(q)
        if k is None:
            self.counts["dense_by_cost"] += self.paper_entries(q) is not None
            if g is not None and res.empty and res.exact:
                return self._dense_of(g)
            return res.take(g, None, score)
        started = time.perf_counter()
        out = res.take(g, k, score)
        took = time.perf_counter() - started
        old = self.select_s
        self.select_s = took if old is None else old + SELECT_ALPHA * (took - old)
        return out

    def _dense_of(self, g: torch.Tensor) -> Payload:
        """This iteration's gradient as a dense payload, one copy for every link that carries
        it whole with nothing held back (what such a link's residual take returns: the
        gradient itself); a copy because the update then changes ``g`` in place while the
        transport may still hold the payload's buffer."""
        if self._dense is None:
            self._dense = Payload("dense", self.flat.n, g.detach().clone().numpy())
        return self._dense

    def peer_rejoined(self, q: int) -> None:
        """The link to ``q``'s new process starts without the old one's residual (what the old
        process never received is not sent to the new one)."""
        self.residuals.pop(q, None)

    def residual(self, channel: Channel) -> Residual:
        if channel not in self.residuals:
            self.residuals[channel] = Residual(self.flat.n, device=str(self.device))
        return self.residuals[channel]

    def score(self) -> Score:
        """The contribution measure: |v| (None), or Gaia-like |eta v| / (|w| + 1e-8)."""
        if self.cfg.contribution != "relative":
            return None
        lr = self.lr_now / self.k
        weights: list[torch.Tensor] = []  # read at the first sparse take only: a dense one
        # never scores

        def relative(v: torch.Tensor) -> torch.Tensor:
            if not weights:
                weights.append(self.flat.weights().abs().add_(1e-8))
            return (v * lr).abs().div_(weights[0])

        return relative

    def iteration(self, t: int, g: torch.Tensor, epoch: int) -> None:
        started = time.perf_counter()
        score = self.score()
        meta = {"ack": self.acks}
        self._dense = None  # this iteration's gradient, dense, once for every link
        if self.cfg.selective:
            expected = self._send_selective(t, g, score)
        else:
            for q in self.peers:
                self.send_grad(q, t, self.take(self.residual(q), g, q, score), meta)
            expected = self.peers
        self._dense = None
        self.times["exchange_s"] += time.perf_counter() - started
        self.wait_for_gradients(t, expected)
        self.update(g, t)
        with self.cpu.part("weights"):
            self.weight_exchange(t)
            self.merge_weights()

    def _send_selective(self, t: int, g: torch.Tensor, score: Score) -> list[int]:
        """LAN exchange inside the site; over the WAN only this iteration's sender sites, to
        its receiver sites. Returns the workers whose gradient of ``t`` reaches this one."""
        cfg = self.cfg
        groups = members(self.sites, [self.me, *self.peers])
        caps = {s: sum(self.capacities.get(w, 1.0) for w in ws) for s, ws in groups.items()}
        n_s = len(groups)
        senders, receivers = choose_sites(
            self.recipe.run.seed,
            t,
            caps,
            cfg.selective_senders or default_count(n_s),
            cfg.selective_receivers or default_count(n_s),
        )
        mine = self.site
        self.counts["site_sender"] += mine in senders
        self.counts["site_receiver"] += mine in receivers
        meta = {"ack": self.acks}
        for q in groups.get(mine, []):
            if q != self.me:
                self.send_grad(q, t, self.take(self.residual(q), g, q, score), meta)
        for site in groups:
            if site != mine:
                self.residual(("site", site)).add(g)
        routes = wan_routes(senders, receivers, groups)
        vias: dict[int, list[int]] = {}
        for r in routes:
            if r.origin == self.me:
                forward = vias.setdefault(r.via, [])
                if r.dest != r.via:
                    forward.append(r.dest)
        for via, forward in vias.items():
            res = self.residual(("site", self.sites.get(via) or ""))
            payload = self.take(res, None, via, score)
            self.send_grad(via, t, payload, {**meta, "forward": forward})
        lan = [q for q in groups.get(mine, []) if q != self.me]
        return lan + sorted({r.origin for r in routes if r.dest == self.me})

    def received(self, sender: int, head: Header, payload: Payload, msg: Message) -> None:
        self.add_inbound(head.t, payload)
        forward = msg.meta.get("forward")
        if not self.cfg.selective or not isinstance(forward, list):
            return
        meta = {k: v for k, v in msg.meta.items() if k not in ("forward", "ack")}
        for q in forward:
            # only to live workers of this site: a message cannot make us flood anyone else
            ok = isinstance(q, int) and q in self.peers and self.link(q) == LAN
            if ok:
                node = self._node
                out = Message(GRAD, node.name, node.run_id, head.t, 0, meta, msg.tensors)
                if self.deliver(q, out):
                    self.counts["forwarded"] += 1

    def acked(self, q: int, sent: Sent, seconds: float, fresh: bool) -> None:
        if q in self.bw:
            self.bw[q].observe(sent.nbytes, seconds, fresh)

    # ------------------------------------------------------------------ weight exchange

    def weight_exchange(self, t: int) -> None:
        cfg = self.cfg
        if not due(t, self.pi, cfg.we_when, cfg.we_every, cfg.we_early_until, cfg.we_late_from):
            return
        upto = self.sync_upto(t)
        view = self.losses_at.get(upto, {}) if upto is not None else self.losses
        alive = {w: v for w, v in view.items() if w not in self.failed}
        if cfg.we_whom == "all":
            targets, sources = self.peers, self.peers
        else:
            pair = best_and_worst(alive)
            if pair is None:
                return
            best, worst = pair
            targets = [worst] if self.me == best else []
            sources = [best] if self.me == worst else []
        if targets:
            payload = self._weights_payload()
            for q in targets:
                msg = self.message(WEIGHTS, t, {"beta": cfg.we_beta}, payload)
                if self.deliver(q, msg):
                    self.we["sent"] += 1
                    self.we["bytes"] += payload.nbytes
        if cfg.we_how == "sync" and sources:
            keys: list[Key] = [(WEIGHTS, s, t) for s in sources]
            self.await_keys(keys, t)

    def _weights_payload(self) -> Payload:
        w = self.flat.weights()
        if self.cfg.we_what == "full":
            self.snapshot = w.clone()
            vals, _ = to_float32(w)
            return Payload("dense", self.flat.n, vals)
        assert self.snapshot is not None
        idx = largest_changes(w - self.snapshot, self.cfg.we_fraction)
        self.snapshot = w.clone()
        vals, _ = to_float32(w[idx])
        return Payload("sparse", self.flat.n, vals, idx.to(torch.int32).cpu().numpy().copy())

    def received_weights(self, sender: int, head: Header, payload: Payload, msg: Message) -> None:
        self.weights_in.append(payload)
        self.we["received"] += 1

    @torch.no_grad()
    def merge_weights(self) -> None:
        """Merge the weights that arrived: the plain mean of everyone's (``we_whom = "all"``),
        else w <- (1 - beta) w + beta mean(received), entry by entry for partial payloads."""
        if not self.weights_in:
            return
        w = self.flat.weights()
        total = torch.zeros_like(w)
        count = torch.zeros_like(w)
        for p in self.weights_in:
            p.add_into(total)
            if p.kind == "dense":
                count.add_(1.0)
            elif p.indices is not None:
                count[torch.from_numpy(p.indices.astype("int64"))] += 1.0
        got = count > 0
        if self.cfg.we_whom == "all":
            w[got] = (w[got] + total[got]) / (count[got] + 1.0)
        else:
            beta = self.cfg.we_beta
            w[got] = (1.0 - beta) * w[got] + beta * total[got] / count[got]
        self.flat.load(w)
        self.we["merges"] += len(self.weights_in)
        self.weights_in.clear()

    # ------------------------------------------------------------------ reporting

    def extra_metrics(self) -> dict[str, Any]:
        return {
            "t_unit": self.t_unit,
            "t_unit_now": self.t_unit_now if self.base else None,
            "t_bs": self.t_bs,
            "bandwidth_Bps": {str(q): b.value for q, b in self.bw.items()},
            "bandwidth_samples": {str(q): b.samples for q, b in self.bw.items()},
            "entries": {str(q): self.entries(q) for q in self.bw} if self.base else {},
            "we_sent": self.we["sent"],
            "we_received": self.we["received"],
            "we_merges": self.we["merges"],
            "we_bytes": self.we["bytes"],
            "forwarded": self.counts["forwarded"],
            "site_sender": self.counts["site_sender"],
            "site_receiver": self.counts["site_receiver"],
            "select_ms": 1000 * self.select_s if self.select_s is not None else None,
            "dense_by_cost": self.counts["dense_by_cost"],
            "lr_cap": self.guard.cap,  # the loss guard's cap on the LR factor (None: none)
            "lr_guard_trips": [list(trip) for trip in self.guard.trips],
        }


def lr_factor(recipe: Recipe) -> float:
    """The most DLion multiplies ``[train] lr`` by: its ``k`` workers under WarmUpLR and
    LargeLR (:class:`~edgetrain.gossip.exchange.schedules.Schedule`), 1 under SmallLR."""
    cfg = DLionSection.of(recipe)
    workers = recipe.role_names().count("trainer")
    return 1.0 if cfg.lr_policy == "small" else float(workers)


# The launcher side (see :mod:`.side`).
SIDE = replace(exchange_side(DLionSection, "DLion", plans_batches=True), lr_factor=lr_factor)
