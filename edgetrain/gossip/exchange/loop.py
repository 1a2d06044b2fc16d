"""The worker DLion, Gaia and Ako share: decentralised data-parallel SGD in which every worker
keeps a replica and applies its own gradient and the (partial) gradients its peers send it
(DLion's Eq. 5, gossip.md B.2 and B.7), iteration by iteration.

One iteration t on worker j:

1. the learning rate and every worker's batch size at progress pi (the technique's schedule;
   pi = samples the whole cluster processed / (epochs x training set), the same on every worker);
2. m_j samples from the shard (cyclic passes, reshuffled), the mean gradient g_j, timed as
   compute (an emulated ``slowdown`` sleeps after it, counted as compute too);
3. the technique's exchange: payloads to peers, without blocking;
4. with ``sync = "iteration"`` a wait until every message of iteration t - staleness that this
   worker expects has come (its time is the worker's *idle* time; a peer the coordinator names
   failed is no longer waited for; ``wait_timeout_s`` gives up on a message, counted);
5. the update w_j <- w_j - eta_t (1/k) (g_j + everything received since the last update), with
   the recipe's optimiser (momentum kept), so every arm steps alike.

A global epoch is the training set's N samples across the cluster: it ends after the iteration
that takes the cluster total past epoch x N (gossip.md B.3), the same iteration on every
worker. The plan (batch sizes, T_unit, the capacities) comes from the controller in the start
directive (:mod:`.controller`); the pilot that measures each worker's
capacity runs in ``setup``, before the run's clock starts, and its time is reported apart.

A restarted worker rejoins at an epoch barrier with a peer's model and the run's iteration
(:mod:`.rejoin`).
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import zmq
from torch import nn

from edgetrain.comm import activity, protocol
from edgetrain.comm.client import Serve
from edgetrain.comm.control import HandIn
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Message, arrays_from_state
from edgetrain.errors import RunError
from edgetrain.gossip.config import ExchangeSection, GossipSection
from edgetrain.gossip.exchange import capacity
from edgetrain.gossip.exchange.bandwidth import LAN, WAN, link_class, site_of
from edgetrain.gossip.exchange.cpu_parts import CpuParts
from edgetrain.gossip.exchange.flat import Flat
from edgetrain.gossip.exchange.messages import ACK, GRAD, TYPES, WEIGHTS, Expectations, Header, Key
from edgetrain.gossip.exchange.rejoin import FETCH_WAIT_S, MODEL, donor_of, model_fields
from edgetrain.gossip.exchange.sampling import CyclicSampler
from edgetrain.gossip.exchange.schedules import progress
from edgetrain.gossip.exchange.sparse import Payload, payload_from
from edgetrain.gossip.exchange.weightex import LossEwma
from edgetrain.gossip.gosgd import expectations
from edgetrain.gossip.node import GossipNode, NodeHolder
from edgetrain.gossip.rejoin import model_message
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import Final, Ready, WorkerContext, meta_float
from edgetrain.runtime.epochs import run_epochs
from edgetrain.runtime.session import Session
from edgetrain.runtime.setup import build_run_model, load_run_data, worker_indices
from edgetrain.runtime.snapshots import Snapshots
from edgetrain.runtime.throttle import Throttle
from edgetrain.runtime.trainer import evaluate, optimizer_for, resolve_device
from edgetrain.runtime.weights import float_state, load_arrays, model_sha256, state_arrays

log = logging.getLogger(__name__)

_PILOT_SALT = 0x9110
LOSS_HISTORY = 256  # iterations of peers' losses kept for synchronous decisions
# How far ahead of this worker a peer's message may be under sync = "iteration" (a peer can be
# at most staleness + 2 ahead): anything further is refused, so no message makes us keep a
# buffer for an iteration that never comes.
MAX_LEAD = 64


@dataclass(frozen=True)
class Sent:
    """A gradient message on its way, for the bandwidth estimate its acknowledgement feeds."""

    at: float
    nbytes: int


class Decentral(NodeHolder):
    """The runner of one exchange technique's worker (role ``trainer``); subclasses add the
    exchange (:meth:`begin`, :meth:`iteration`, :meth:`received`)."""

    model: ClassVar[type[ExchangeSection]] = ExchangeSection  # its own section
    # A restarted process of it can rejoin a running run at an epoch barrier (.rejoin).
    rejoins = True

    @staticmethod
    def rejoin_blocker(recipe: Recipe) -> str | None:
        """Why no worker can rejoin a run of ``recipe`` (None: it can): it re-enters at an
        epoch barrier, which ``[gossip] sync_epochs = false`` does without."""
        if GossipSection.of(recipe).sync_epochs:
            return None
        return "run with [gossip] sync_epochs = false: no epoch barrier to re-enter at"

    def __init__(self, ctx: WorkerContext) -> None:
        recipe = ctx.recipe
        self.ctx = ctx
        self.recipe = recipe
        self.gossip = GossipSection.of(recipe)
        self.xcfg = self.model.of(recipe)
        self.me = ctx.worker_id
        self.k = recipe.num_workers
        self.epochs = recipe.train.epochs
        self.b0 = recipe.train.batch_size
        self.base_lr = recipe.train.lr
        self.node: GossipNode | None = None
        self.session: Session | None = None
        self.t = 0  # iterations done
        self.samples = 0  # samples the whole cluster processed (by the plan)
        self.n_train = 0
        self.ids: tuple[int, ...] = ()  # the workers the plan covers, ascending
        self.base: tuple[int, ...] = ()  # their planned batch sizes
        self.batches_now: tuple[int, ...] = ()
        self.plan: dict[str, Any] = {}
        self.plan_reported = False
        self.lr_now = self.base_lr
        self.pi = 0.0
        self.sites: dict[int, str | None] = {}
        self.failed: set[int] = set()
        self.expect = Expectations()
        self.loss_ewma = LossEwma(20)
        self.losses: dict[int, float] = {}  # every worker's latest smoothed loss
        self.losses_at: dict[int, dict[int, float]] = {}  # iteration -> worker -> loss
        self.times: defaultdict[str, float] = defaultdict(float)
        self.cpu = CpuParts()  # the main thread's CPU in the steps, part by part
        self.counts: Counter[str] = Counter()
        self.sent_at: dict[tuple[int, int], Sent] = {}
        self.inbound: dict[int, torch.Tensor] = {}  # iteration -> sum of what arrived for it
        self.finishing = False
        self.absorbing = False  # inside absorb(): a send that waits must not absorb again
        self.curve: capacity.Curve = []
        self.pilot_s = 0.0
        self.mark = (0.0, 0.0)  # (clock, wait_s) at the start of the epoch
        self.step_times: list[float] = []  # this epoch's steps: compute plus slowdown
        self.epoch_idle: float | None = None
        self.rejoin_report: dict[str, Any] | None = None  # reported with the first epoch
        self.models_served: list[dict[str, Any]] = []  # to rejoined peers, since the last report
        self._held: list[Message] = []  # came while this process waited for its donor's model

    # ------------------------------------------------------------------ setup

    def setup(self) -> Ready:
        ctx, recipe = self.ctx, self.recipe
        group = recipe.expanded_workers()[self.me]
        torch.set_num_threads(group.threads)
        data = load_run_data(recipe)
        mine = worker_indices(recipe, data, self.me)
        self.n_train = len(data.y_train)
        self.device = resolve_device(recipe.train.device)
        self.net: nn.Module = build_run_model(recipe, data).to(self.device)
        self.x = torch.from_numpy(np.ascontiguousarray(data.x_train[mine])).to(self.device)
        self.y = torch.from_numpy(np.ascontiguousarray(data.y_train[mine])).to(self.device)
        self.x_test = torch.from_numpy(np.ascontiguousarray(data.x_test)).to(self.device)
        self.y_test = torch.from_numpy(np.ascontiguousarray(data.y_test)).to(self.device)
        self.flat = Flat([p for p in self.net.parameters() if p.requires_grad])
        self.optimizer = optimizer_for(self.flat.params, recipe.train)
        self.state = float_state(self.net)
        self.throttle = Throttle(group.slowdown)
        self.sampler = CyclicSampler(len(mine), recipe.run.seed, self.me)
        if ctx.resume is not None:
            load_arrays(self.state, ctx.resume.weights, self.optimizer)
            meta_float(ctx.resume, "alpha", self.me)
        self.samples = (ctx.start_epoch - 1) * self.n_train
        outbox = max(self.gossip.outbox, 16 + 4 * self.xcfg.staleness)
        self.node = GossipNode(
            Transport.of(ctx),
            send_hwm=outbox,
            types=(*TYPES, MODEL),
            keep_buffers=self.gossip.keep_buffers,
            uncounted=(MODEL,),
        )
        started = time.perf_counter()
        self.pilot_wait_s = 0.0
        self.curve = self._capacity()
        self.pilot_s = time.perf_counter() - started
        log.info(
            "%s: %d samples, %d parameters, capacity %s (%.2f s to measure), slowdown %.2f",
            self.model.NAME,
            len(mine),
            self.flat.n,
            ", ".join(f"{m}: {c:.0f}/s" for m, c in self.curve),
            self.pilot_s,
            group.slowdown,
        )
        meta = {
            "samples": len(mine),
            "n_train": self.n_train,
            "curve": [[m, c] for m, c in self.curve],
            "pilot_s": self.pilot_s,
            "pilot_wait_s": self.pilot_wait_s,  # of pilot_s: waiting for others' pilots
            "n_params": self.flat.n,
            "model_bytes": self.flat.nbytes,
            "host": ctx.host,
        }
        return Ready({"gossip": self.node.endpoint}, meta)

    def _capacity(self) -> capacity.Curve:
        cfg = self.xcfg
        if cfg.capacity == "profile" and cfg.profile:
            curve = capacity.from_profile(cfg.profile, self.ctx.host)
            if curve is not None:
                return curve
        sampler = CyclicSampler(len(self.y), self.recipe.run.seed + _PILOT_SALT, self.me)

        def step(m: int) -> float:
            started = time.perf_counter()
            self._gradient(sampler.next(m), count=False)
            return time.perf_counter() - started

        # on one CPU thread the steps' CPU time says what a step costs, and the pilot's CPU
        # share how fast the host runs it (capacity.pilot); elsewhere wall time alone
        one_cpu = self.device.type == "cpu" and torch.get_num_threads() == 1
        with capacity.one_pilot_at_a_time() as waited:
            curve = capacity.pilot(
                step,
                capacity.pilot_sizes(self.b0),
                cfg.pilot_s,
                cpu=time.thread_time if one_cpu and cfg.pilot_clock == "cpu" else None,
            )
        self.pilot_wait_s = waited
        for p in self.flat.params:
            p.grad = None
        return curve

    # ------------------------------------------------------------------ run

    def run(self, session: Session) -> Final:
        node = self._node
        self.session = session
        node.connect(session.roster.endpoints("trainer", "gossip"))
        session.on_failed(self._on_failed)
        session.on_joined(self._peer_joined)
        self.sites = self._sites(session)
        if session.rejoin_epoch is not None:
            self._rejoin(session)
        deferred = self.recipe.train.eval_deferred
        steps = run_epochs(
            session,
            self,
            epochs=self.epochs,
            start_epoch=session.rejoin_epoch or self.ctx.start_epoch,
            eval_every=self.recipe.train.eval_every,
            worker_id=self.me,
            snapshots=Snapshots(self.net, self.evaluate) if deferred else None,
        )
        self.finishing = True
        sent = {str(k): v for k, v in node.sent.items()}
        drain = session.done({"sent": sent}, self.epochs, steps, self.serve())
        expected = self._drain(session, drain)
        acc, loss = self.evaluate()
        metrics = {
            **self.metrics(),
            "final_test_accuracy": acc,
            "final_test_loss": loss,
            "steps": steps,
            "alpha": 1.0 / self.k,
            "drain_expected": expected,
        }
        handin = HandIn(arrays_from_state(self.state), {"alpha": 1.0 / self.k})
        return Final(handin, metrics)

    @property
    def _session(self) -> Session:
        assert self.session is not None, "run() starts the session"
        return self.session

    def _sites(self, session: Session) -> dict[int, str | None]:
        """Every trainer's site: the hosts file's, else the recipe's ``sites`` (local runs)."""
        sites = {m.id: m.site for m in session.roster.of("trainer")}
        named = self.xcfg.sites
        if all(s is None for s in sites.values()) and named is not None:
            sites = {w: named[w] if w < len(named) else None for w in sites}
        return sites

    @property
    def peers(self) -> list[int]:
        """The peers still in the run."""
        return [q for q in self._node.peers if q not in self.failed]

    def link(self, q: int) -> str:
        return link_class(self.me, q, self.sites)

    @property
    def site(self) -> str:
        return site_of(self.me, self.sites)

    # ------------------------------------------------------------------ rejoin

    def _rejoin(self, session: Session) -> None:
        """This process replaces a lost one: wait for the donor's model, iteration and samples
        (:mod:`.rejoin`); what else comes meanwhile is handled afterwards, in order."""
        node = self._node
        started = time.monotonic()
        before = model_sha256(arrays_from_state(self.state))
        deadline = started + FETCH_WAIT_S
        while time.monotonic() < deadline:
            if node.inbox.poll(100, zmq.POLLIN):
                for msg in node.receive_all():
                    if msg.type != MODEL:
                        self._held.append(msg)
                    elif self._take_model(msg, before, started, session):
                        return
            session.poll()
        raise RunError(
            f"worker {self.me} rejoined at epoch {session.rejoin_epoch}, but no peer sent it "
            f"the model within {FETCH_WAIT_S:.0f} s"
        )

    def _take_model(self, msg: Message, before: str, started: float, session: Session) -> bool:
        """Load a donor's model; False (counted) when it cannot be taken."""
        node = self._node
        reason = model_fields(msg.meta, msg.tensors)
        if reason is None:
            try:
                load_arrays(self.state, msg.tensors, self.optimizer, what="model from a peer")
            except Exception as exc:  # noqa: BLE001 - counted, the next answer may fit
                log.warning("a peer's model does not fit: %s", exc)
                reason = "bad_model_tensors"
        if reason is not None:
            node.traffic.drop(reason, msg.sender)
            return False
        self.t, self.samples = int(msg.meta["t"]), int(msg.meta["samples"])
        self.rejoin_report = {
            "epoch": session.rejoin_epoch,
            "source": "peer",
            "peer": node.peer_ids.get(msg.sender),
            "iteration": self.t,
            "samples": self.samples,
            "model_sha256": model_sha256(arrays_from_state(self.state)),
            "peer_sha256": msg.meta.get("model_sha256"),
            "before_sha256": before,
            "fetch_s": time.monotonic() - started,
        }
        log.info("rejoined at iteration %d with the model of %s", self.t, msg.sender)
        return True

    def _peer_joined(self, joined: Mapping[int, Mapping[str, str]]) -> None:
        """Peers that rejoined (heard of at the barrier they re-enter at): send to and expect
        from their new processes from this worker's next iteration on; the donor among the
        live workers hands each its model."""
        node = self._node
        for q, endpoints in sorted(joined.items()):
            url = endpoints.get("gossip")
            if q == self.me or not url or q not in node.peers:
                continue
            node.reconnect(q, url)
            self.failed.discard(q)
            self.peer_rejoined(q)
            live = [w for w in (self.me, *node.peers) if w not in self.failed]
            if donor_of(q, live, self.k) == self.me:
                self._serve_model(q)

    def _serve_model(self, q: int) -> None:
        meta = {"t": self.t, "samples": self.samples}
        msg, sha = model_message(self._node, MODEL, self.state, self.optimizer, meta, self.t)
        if self.deliver(q, msg):
            self.models_served.append({"to": q, "iteration": self.t, "model_sha256": sha})
            log.info("sent the model (iteration %d) to rejoined worker %d", self.t, q)

    def peer_rejoined(self, q: int) -> None:
        """Peer ``q`` is back with a new process: forget what this worker kept for its old one
        (a technique's per-link state)."""

    def _on_failed(self, failed: set[int]) -> None:
        for w in failed - self.failed:
            dropped = self.expect.forget_origin(w)
            log.info("worker %d failed: no longer waiting for %d of its messages", w, dropped)
        self.failed |= failed

    # ------------------------------------------------------------------ the plan

    def apply(self, directive: Mapping[str, Any]) -> None:
        plan = directive.get("plan")
        if not isinstance(plan, dict):
            if not self.base:  # no plan at all: every worker b0
                self._set_plan({"batches": {str(w): self.b0 for w in range(self.k)}})
            return
        self._set_plan(plan)

    def _set_plan(self, plan: dict[str, Any]) -> None:
        raw = plan.get("batches")
        batches: dict[int, int] = {}
        if isinstance(raw, dict):
            for key, m in raw.items():
                ok = isinstance(m, int) and not isinstance(m, bool) and 1 <= m <= 1_000_000
                if str(key).isdigit() and ok:
                    batches[int(key)] = m
        if self.me not in batches:
            self.counts["bad_plan"] += 1
            log.warning("the plan has no batch size for this worker: every worker b0")
            batches = {w: self.b0 for w in range(self.k)}
        self.plan = dict(plan)
        self.ids = tuple(sorted(batches))
        self.base = tuple(batches[w] for w in self.ids)
        self.batches_now = self.base
        self.begin(plan)

    def batch_of(self, batches: tuple[int, ...], worker: int) -> int:
        return batches[self.ids.index(worker)]

    # ------------------------------------------------------------------ technique hooks

    def begin(self, plan: Mapping[str, Any]) -> None:
        """Set up the exchange once the plan and the roster are known."""

    def batches_at(self, pi: float) -> tuple[int, ...]:
        """Every planned worker's batch size at progress ``pi`` (default: the plan's)."""
        return self.base

    def lr_factor(self, pi: float) -> float:
        """eta_t / eta at ``pi`` (default: 1)."""
        return 1.0

    def iteration(self, t: int, g: torch.Tensor, epoch: int) -> None:
        """Exchange and update for iteration ``t`` with this worker's gradient ``g``."""
        raise NotImplementedError

    def received(self, sender: int, head: Header, payload: Payload, msg: Message) -> None:
        """A valid gradient payload arrived (default: into its iteration's sum)."""
        self.add_inbound(head.t, payload)

    def add_inbound(self, t: int, payload: Payload) -> None:
        if self.xcfg.sync == "async":
            t = 0  # applied at the next update whatever its iteration: one sum
        if t not in self.inbound:
            self.inbound[t] = torch.zeros(self.flat.n, device=self.device)
        payload.add_into(self.inbound[t])

    def take_inbound(self, upto: int | None) -> torch.Tensor | None:
        """The sum of what arrived for iterations up to ``upto`` (None: everything), removed."""
        ready = sorted(u for u in self.inbound if upto is None or u <= upto)
        if not ready:
            return None
        total = self.inbound.pop(ready[0])
        for u in ready[1:]:
            total.add_(self.inbound.pop(u))
        return total

    def received_weights(self, sender: int, head: Header, payload: Payload, msg: Message) -> None:
        """A valid weights payload arrived (default: ignored, counted)."""
        self.counts["unexpected_weights"] += 1

    def extra_metrics(self) -> dict[str, Any]:
        return {}

    # ------------------------------------------------------------------ EpochWork

    def batches(self, epoch: int) -> Iterator[int]:
        self.mark = (time.perf_counter(), self.times["wait_s"])
        self.step_times = []
        end = epoch * self.n_train
        while self.samples < end:
            yield self.t

    def step(self, epoch: int, batch: int) -> float:
        cpu0 = time.process_time()
        try:
            with self.cpu.part("step"):
                return self._step(epoch)
        finally:
            self.times["cpu_s"] += time.process_time() - cpu0

    def _step(self, epoch: int) -> float:
        t = self.t
        self.pi = progress(self.samples, self.epochs, self.n_train)
        self.batches_now = self.batches_at(self.pi)
        self.lr_now = self.base_lr * self.lr_factor(self.pi)
        m = self.batch_of(self.batches_now, self.me)
        with self.cpu.part("sample"):
            idx = self.sampler.next(m)
        with self.cpu.part("gradient"):
            loss, g = self._gradient(idx)
        if self.xcfg.gradient_weighting == "sample":
            g.mul_(len(self.ids) * m / sum(self.batches_now))
        self.note_loss(self.me, t, self.loss_ewma.update(loss))
        self.iteration(t, g, epoch)
        self.t += 1
        self.samples += sum(self.batches_now)
        self.expect.prune(t - LOSS_HISTORY)
        for old in [u for u in self.losses_at if u < t - LOSS_HISTORY]:
            del self.losses_at[old]
        return loss

    def _gradient(self, idx: np.ndarray, count: bool = True) -> tuple[float, torch.Tensor]:
        """The mean gradient over the samples ``idx`` of this worker's shard."""
        sel = torch.from_numpy(idx).to(self.device)
        started, cpu0 = time.perf_counter(), time.thread_time()
        self.net.train()
        for p in self.flat.params:
            p.grad = None
        loss = nn.functional.cross_entropy(self.net(self.x[sel]), self.y[sel])
        loss.backward()
        g = self.flat.grad()
        value = float(loss.detach())
        spent = time.perf_counter() - started
        cpu = time.thread_time() - cpu0
        slept = self.throttle.after(spent)
        if count:
            self.times["compute_s"] += spent
            self.times["compute_cpu_s"] += cpu
            self.times["computed_samples"] += len(idx)
            self.times["sleep_s"] += slept
            self.step_times.append(spent + slept)
        return value, g

    def note_loss(self, worker: int, t: int, loss: float) -> None:
        self.losses[worker] = loss
        if self.xcfg.sync == "iteration":
            self.losses_at.setdefault(t, {})[worker] = loss

    def too_far(self, t: int) -> bool:
        """A message of iteration ``t`` cannot come from a correct peer now."""
        return self.xcfg.sync == "iteration" and t > self.t + self.xcfg.staleness + MAX_LEAD

    def evaluate(self) -> tuple[float, float]:
        return evaluate(self.net, self.x_test, self.y_test)

    def checkpoint(self) -> HandIn:
        return HandIn(state_arrays(self.state, self.optimizer), {"alpha": 1.0 / self.k})

    def serve(self) -> Serve:
        return [(self._node.inbox, self.absorb)]

    # ------------------------------------------------------------------ the update

    @torch.no_grad()
    def update(self, g: torch.Tensor, t: int) -> None:
        """w <- w - eta_t (1/k) (g + received), through the optimiser (Eq. 5). Synchronous:
        what arrived for iterations up to ``t`` (a faster peer's next gradient waits for the
        next update, so with full exchange every replica takes the same steps); asynchronous:
        everything that arrived."""
        with self.cpu.part("update"):
            self._update(g, t)

    def _update(self, g: torch.Tensor, t: int) -> None:
        got = self.take_inbound(None if self.xcfg.sync == "async" else t)
        direction = g.add_(got) if got is not None else g
        self.step_on(direction.div_(self.k))

    def step_on(self, direction: torch.Tensor) -> None:
        self.flat.set_grad(direction)
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_now
        self.optimizer.step()

    # ------------------------------------------------------------------ sending

    def message(self, kind: str, t: int, meta: Mapping[str, Any], payload: Payload) -> Message:
        node = self._node
        full = {"t": t, "origin": self.me, **payload.meta(), **meta}
        return Message(kind, node.name, node.run_id, t, 0, full, payload.tensors())

    def send_grad(
        self, q: int, t: int, payload: Payload, meta: Mapping[str, Any] | None = None
    ) -> bool:
        """Send a gradient payload to ``q``; with ``ack`` in ``meta`` remember it for the
        bandwidth estimate."""
        with self.cpu.part("send"):
            return self._send_grad(q, t, payload, meta)

    def _send_grad(self, q: int, t: int, payload: Payload, meta: Mapping[str, Any] | None) -> bool:
        extra = dict(meta or {})
        info = {"loss": self.losses.get(self.me), "m": self.batch_of(self.batches_now, self.me)}
        msg = self.message(GRAD, t, {**info, **extra}, payload)
        if not self.deliver(q, msg):
            return False
        if extra.get("ack"):
            self.sent_at[(q, t)] = Sent(time.perf_counter(), payload.nbytes)
        return True

    def deliver(self, q: int, msg: Message) -> bool:
        """Queue ``msg`` for ``q``, waiting for room (serving the inbox meanwhile) at most
        ``wait_timeout_s``; False (counted) when ``q`` failed or the time ran out."""
        node = self._node
        deadline = time.monotonic() + self.xcfg.wait_timeout_s
        while not node.wait_room(q, 20):
            if not self.absorbing:  # keep our own inbox moving: the peer may wait on us too
                self.absorb()
            self._session.poll()
            if q in self.failed:
                return False
            if time.monotonic() > deadline:
                node.traffic.drop("send_timeout", protocol.worker_name(q))
                return False
        return node.send(q, msg)

    # ------------------------------------------------------------------ receiving

    def absorb(self, fresh: bool = False) -> None:
        """Handle every message waiting in the inbox. ``fresh``: they arrived while this worker
        was waiting for them (their acknowledgement times the link, not this worker's step)."""
        self.absorbing = True
        try:
            with self.cpu.part("receive"):
                self._absorb(fresh)
        finally:
            self.absorbing = False

    def _absorb(self, fresh: bool) -> None:
        node = self._node
        held, self._held = self._held, []
        for msg in [*held, *node.receive_all()]:
            sender = node.peer_ids[msg.sender]
            if msg.type == ACK:
                self._on_ack(sender, msg)
            elif msg.type == GRAD:
                self._on_grad(sender, msg, fresh)
            elif msg.type == WEIGHTS:
                self._on_weights(sender, msg)
            else:  # a donor's model that came after this process had one
                node.traffic.drop("unexpected_model", msg.sender)

    def _on_ack(self, sender: int, msg: Message) -> None:
        t = msg.meta.get("t")
        sent = self.sent_at.pop((sender, t), None) if isinstance(t, int) else None
        if sent is not None:
            self.acked(sender, sent, time.perf_counter() - sent.at, msg.meta.get("fresh") is True)

    def acked(self, q: int, sent: Sent, seconds: float, fresh: bool) -> None:
        """An acknowledgement of a message to ``q`` came back after ``seconds``."""

    def _on_grad(self, sender: int, msg: Message, fresh: bool) -> None:
        node = self._node
        head = Header.parse(msg.meta, sender)
        if head is None or self.too_far(head.t):
            node.traffic.drop("bad_grad_header" if head is None else "bad_iteration", msg.sender)
            self.counts["dropped_payloads"] += 1
            return
        if head.loss is not None:
            self.note_loss(head.origin, head.t, head.loss)
        if msg.meta.get("ack") is True and not self.finishing:
            ack = Message(ACK, node.name, node.run_id, head.t, 0, {"t": head.t, "fresh": fresh})
            node.send(sender, ack)  # a full queue skips it: an estimate lacks one sample
        payload = payload_from(msg.meta, msg.tensors, self.flat.n)
        if isinstance(payload, str):
            node.traffic.drop(payload, msg.sender)
            self.counts["dropped_payloads"] += 1
        else:
            self.received(sender, head, payload, msg)
        self.expect.arrived((GRAD, head.origin, head.t))

    def _on_weights(self, sender: int, msg: Message) -> None:
        node = self._node
        head = Header.parse(msg.meta, sender)
        if head is not None and self.too_far(head.t):
            node.traffic.drop("bad_iteration", msg.sender)
            self.counts["dropped_payloads"] += 1
            return
        payload = payload_from(msg.meta, msg.tensors, self.flat.n) if head else "bad_header"
        if head is None or isinstance(payload, str):
            node.traffic.drop(str(payload), msg.sender)
            self.counts["dropped_payloads"] += 1
            if head is not None:
                self.expect.arrived((WEIGHTS, head.origin, head.t))
            return
        self.received_weights(sender, head, payload, msg)
        self.expect.arrived((WEIGHTS, head.origin, head.t))

    # ------------------------------------------------------------------ waiting

    def await_keys(self, keys: Iterable[Key], upto: int) -> None:
        """Expect ``keys`` and wait until nothing of iterations up to ``upto`` is missing."""
        self.expect.expect(k for k in keys if k[1] not in self.failed and k[1] != self.me)
        self.wait(upto)

    def wait(self, upto: int) -> None:
        """Block (serving the inbox and the coordinator) until no expected message of an
        iteration up to ``upto`` is missing, or ``wait_timeout_s`` passed."""
        started = time.perf_counter()
        deadline = time.monotonic() + self.xcfg.wait_timeout_s
        with contextlib.ExitStack() as said:
            said.enter_context(self.cpu.part("wait"))
            self.absorb()
            waiting = False
            while missing := self.expect.blocking(upto):
                if not waiting:  # what the heartbeats say while this goes on (edgetrain status)
                    said.enter_context(activity.waiting(*_whom(missing)))
                    waiting = True
                if self._waited(missing, deadline):
                    break
        self.times["wait_s"] += time.perf_counter() - started

    def _waited(self, missing: list[Key], deadline: float) -> bool:
        """One turn of :meth:`wait`: True when the time is up (the missing given up)."""
        if time.monotonic() > deadline:
            self.counts["wait_timeouts"] += len(missing)
            log.warning("gave up waiting for %d messages, e.g. %s", len(missing), missing[0])
            self.expect.give_up(missing)
            return True
        if self._node.inbox.poll(50, zmq.POLLIN):
            self.absorb(fresh=True)
        self._session.poll()
        return False

    def sync_upto(self, t: int) -> int | None:
        """The iteration whose messages iteration ``t`` waits for (None: asynchronous)."""
        if self.xcfg.sync == "async":
            return None
        return t - self.xcfg.staleness

    def wait_for_gradients(self, t: int, senders: Iterable[int]) -> None:
        """Iteration ``t``'s wait: take in what has arrived (asynchronous), or wait for the
        gradient of ``t`` (less the staleness bound) from each of ``senders``."""
        upto = self.sync_upto(t)
        if upto is None:
            self.absorb()
        else:
            self.await_keys([(GRAD, q, t) for q in senders], upto)

    def _drain(self, session: Session, directive: Mapping[str, Any]) -> int:
        """Take in messages until every one the live peers sent here has come (or timeout)."""
        node = self._node
        expect_from = expectations(directive.get("expect_from"))
        seen = session.drain_updates
        deadline = time.monotonic() + self.gossip.drain_timeout_s

        def missing() -> int:
            got = node.received_from
            return sum(
                max(0, n - got[protocol.worker_name(int(p))]) for p, n in expect_from.items()
            )

        while missing() and time.monotonic() < deadline:
            if node.inbox.poll(200, zmq.POLLIN):
                self.absorb()
            session.poll()
            if session.drain_updates != seen and session.drain_directive is not None:
                seen = session.drain_updates
                expect_from = expectations(session.drain_directive.get("expect_from"))
        if lost := missing():
            log.warning("drain: %d messages never arrived", lost)
        self.inbound.clear()  # a message after the last update has nothing left to update
        return sum(expect_from.values())

    # ------------------------------------------------------------------ reporting

    def bytes_by_class(self) -> dict[str, int]:
        out = {LAN: 0, WAN: 0}
        for name, n in self._node.traffic.bytes_sent_to.items():
            q = self._node.peer_ids.get(name)
            if q is not None:
                out[self.link(q)] += int(n)
        return out

    def metrics(self) -> dict[str, Any]:
        now = time.perf_counter()
        wall = now - self.mark[0]
        waited = self.times["wait_s"] - self.mark[1]
        by_class = self.bytes_by_class()
        out: dict[str, Any] = {
            "samples": int(self.y.numel()),
            "batch": self.batch_of(self.batches_now, self.me) if self.base else None,
            "batch_total": sum(self.batches_now),
            "iterations": self.t,
            "lr": self.lr_now,
            "pi": self.pi,
            "compute_s": self.times["compute_s"],
            # CPU time, not wall: the gradients' (this thread), and the whole process's over its
            # steps (every thread: the exchange, the transport); a CPU quota's stalls are in
            # compute_s and not here, so these check the cost model's work terms directly
            "compute_cpu_s": self.times["compute_cpu_s"],
            "cpu_s": self.times["cpu_s"],
            "computed_samples": int(self.times["computed_samples"]),  # this worker's gradients'
            # the main thread's CPU in the steps, part by part (.cpu_parts): cpu_s less their
            # sum is the other threads' (the transport's, ZeroMQ's)
            "cpu_parts": self.cpu.as_dict(),
            "sleep_s": self.times["sleep_s"],
            "wait_s": self.times["wait_s"],
            "exchange_s": self.times["exchange_s"],
            "idle_fraction": waited / wall if wall > 0 else None,
            "step_s_median": statistics.median(self.step_times) if self.step_times else None,
            "bytes_lan": by_class[LAN],
            "bytes_wan": by_class[WAN],
            "site": self.site or None,
            "loss_ewma": self.losses.get(self.me),
            "pilot_s": self.pilot_s,
            "dropped_payloads": self.counts["dropped_payloads"],
            "wait_timeouts": self.counts["wait_timeouts"],
            **self._node.traffic.as_dict(),
            **self.extra_metrics(),
        }
        if not self.plan_reported and self.plan:
            out["plan"] = self.plan
            self.plan_reported = True
        if self.rejoin_report is not None:  # the first epoch after a rejoin says so
            out["rejoin"], self.rejoin_report = self.rejoin_report, None
        if self.models_served:
            out["models_served"], self.models_served = self.models_served, []
        return out


def _whom(missing: list[Key]) -> tuple[str, str]:
    """Whom a wait for ``missing`` waits on, and for what (``edgetrain status``)."""
    senders = sorted({k[1] for k in missing})
    on = ", ".join(f"worker {w}" for w in senders[:4]) + (" ..." if len(senders) > 4 else "")
    kind, _, t = min(missing, key=lambda k: k[2])
    return on, f"{kind} of iteration {t}"
