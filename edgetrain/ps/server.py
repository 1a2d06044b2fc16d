"""A parameter-server shard (role ``server``): holds its tensors, answers pulls and pushes,
applies the optimiser.

BSP (default): a pull for iteration i waits until each tensor it asks for has version i (all
of iteration i-1's gradients applied); a tensor's update is applied once every live trainer
pushed it, summed in trainer order (:mod:`edgetrain.ps.gradient_sum`). SSP: each push is applied
as it comes (scaled by 1/K); a tensor's version is then the slowest live trainer's clock (the
iterations every trainer has pushed), and a pull for iteration i waits while that is below
``i - staleness``. Pushes are acknowledged on receipt. With ``[ps] hold_ms = R`` the shard
emulates a link of round trip R (:mod:`edgetrain.ps.delay`): each request is handled R/2 after
it arrived and each reply leaves R/2 after it was made, every message on its own timer in the
serve loop (never a sleep: a burst of pipelined requests is answered one round trip after it
left, not one round trip per request, and other trainers are served meanwhile). Every reply
echoes its request's ``req``, so a trainer with several requests in flight matches the answers.

A shard restarted after its process was lost (``[run] restart``) is rebuilt from the trainers'
copies (:mod:`.recovery`): it holds every request until each live trainer's ``ps.state`` is in,
takes each tensor from the freshest copy at that copy's version, starts its optimiser state
again, then answers what it held.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import zmq

from edgetrain.comm import protocol, sockets
from edgetrain.comm.control import HandIn
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Chunked, Message
from edgetrain.ps import messages
from edgetrain.ps.config import PsSection
from edgetrain.ps.delay import DelayLine
from edgetrain.ps.gradient_sum import Aggregator, Grad, StaleClock, survivor_scale
from edgetrain.ps.layout import Layout, build_layout
from edgetrain.ps.loans import Loan, Loans
from edgetrain.ps.recovery import Replica, rebuild, state_problem
from edgetrain.runtime.base import Final, Ready, WorkerContext
from edgetrain.runtime.session import Session
from edgetrain.runtime.setup import build_run_model, load_run_data
from edgetrain.runtime.trainer import optimizer_for
from edgetrain.runtime.weights import load_arrays, state_arrays

log = logging.getLogger(__name__)


@dataclass
class _Pull:
    identity: bytes
    trainer: int
    it: int
    seg: int
    req: int
    names: list[str]
    need: int
    arrived: float  # when it was handled (with a hold: half the round trip after its receipt)


class ShardServer:
    """One shard of the parameters."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.transport = Transport.of(ctx)
        self.cfg = PsSection.of(ctx.recipe)
        self.one_way = self.cfg.hold_ms / 2000.0  # half the emulated round trip
        self.router: zmq.SyncSocket | None = None
        self.delay = DelayLine()
        self.loans = Loans()  # tensors lent, zero-copy, to pull replies on their way
        self.parked: list[_Pull] = []
        # max_lead: the most iterations an answered pull was ahead of its tensors' version (0
        # under BSP; at most ``staleness`` under SSP)
        self.stats = {"pulls": 0, "pushes": 0, "updates": 0, "held_s": 0.0, "max_lead": 0}
        # updates made at a learning rate scaled down for trainers away ([ps] survivor_lr)
        self.stats |= {"scaled_updates": 0, "least_lr_scale": 1.0}
        self._lr_scale = 1.0
        self.rejoins: list[dict[str, Any]] = []  # trainers taken back, and from which iteration
        # a restarted shard, until it is rebuilt: the trainers whose copy it waits for, the
        # copies in, and the requests that came meanwhile (:mod:`.recovery`)
        self.awaiting: set[int] | None = None
        self.copies: dict[int, tuple[Replica, dict[str, Grad]]] = {}
        self.held: list[tuple[bytes, int, Message]] = []
        self.recovery: dict[str, Any] | None = None

    # ------------------------------------------------------------------ runner

    def setup(self) -> Ready:
        recipe, ctx = self.ctx.recipe, self.ctx
        torch.set_num_threads(recipe.expanded_workers()[ctx.worker_id].threads)
        data = load_run_data(recipe)
        model = build_run_model(recipe, data)
        servers = recipe.role_names().count("server")
        self.layout: Layout = build_layout(model, data.input_shape, servers)
        params = dict(model.named_parameters())
        self.names = self.layout.owned(ctx.role.index)
        self.tensors = {n: params[n].detach().clone() for n in self.names}
        for t in self.tensors.values():
            t.requires_grad_(True)
        self.optimizer = optimizer_for(list(self.tensors.values()), recipe.train)
        start = 0
        if ctx.resume is not None:
            load_arrays(self.tensors, ctx.resume.weights, self.optimizer, what="shard checkpoint")
            start = int(ctx.resume.meta.get("version", 0))
        self.version = dict.fromkeys(self.names, start)
        self.router, endpoint = self.transport.bind(
            zmq.ROUTER, what=f"parameter server {ctx.role.index}"
        )
        # A trainer connects under its own name. Restarted ([run] restart, edgetrain join), it
        # connects again under that name while this end may still hold the old connection (its
        # host rebooted, its link cut: no FIN came), and a ROUTER refuses a second connection
        # of a name it routes to: the new one takes the name over instead.
        self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        nbytes = sum(t.numel() * t.element_size() for t in self.tensors.values())
        if self.cfg.keep_buffers:  # pushed gradients land in warm memory
            sockets.keep_freed_buffers(sockets.keep_bytes_for(nbytes))
        log.info(
            "shard %d: %d tensors, %d bytes, at %s",
            ctx.role.index,
            len(self.names),
            nbytes,
            endpoint,
        )
        return Ready({"ps": endpoint}, {"tensors": len(self.names), "bytes": nbytes})

    def run(self, session: Session) -> Final:
        self.session = session
        self.iterations = int(session.start_directive.get("iterations", 0) or 0)
        trainers = [m.id for m in session.roster.of("trainer")]
        first = min(self.version.values(), default=0)
        self.agg = {n: Aggregator(trainers, first) for n in self.names}
        self.clock = {n: StaleClock(trainers, first) for n in self.names}
        self.trainers = set(trainers)
        self.all_trainers = frozenset(trainers)
        # open slots ([run] join_slots): trainers of the run not started with it, which a new
        # worker may join; one that does counts among the run's trainers from then on
        self.slots = frozenset(self.ctx.recipe.ids_of("trainer")) - self.all_trainers
        self._checkpointed = first
        session.on_failed(self._dropped)
        session.on_joined(self._rejoined)
        if session.rejoin_epoch is not None:  # a restarted process: rebuilt from the trainers
            self.awaiting = set(trainers)
            self._since = time.monotonic()
            log.info("shard restarted: rebuilding it from trainers %s", sorted(trainers))
        assert self.router is not None
        session.wait_drain([(self.router, self._serve)], idle=self._run_timers)
        self._run_timers(final=True)
        weights = state_arrays(self.tensors, self.optimizer)
        meta = {"server": self.ctx.role.index, "version": min(self.version.values(), default=0)}
        metrics: dict[str, Any] = {**self.stats, "steps": 0, "lent_copies": self.loans.copies}
        metrics.update(self.ctx.traffic.as_dict())
        if self.rejoins:
            metrics["rejoined"] = self.rejoins
        if self.recovery is not None:
            metrics["recovery"] = self.recovery
        return Final(HandIn(weights, meta), metrics)

    def close(self) -> None:
        if self.router is not None:
            self.router.close(linger=500)

    # ------------------------------------------------------------------ messages

    def _serve(self) -> None:
        assert self.router is not None
        while self.router.poll(0, zmq.POLLIN):
            # (a pushed gradient of several frames stays unjoined: the sum reads its frames)
            got = self.transport.recv(self.router, messages.TO_SERVER, router=True, join=False)
            if got is None:
                continue
            identity, msg = got
            trainer = protocol.worker_id(msg.sender)
            if trainer not in self.trainers and trainer in self.all_trainers | self.slots:
                # a rejoined trainer's first request can overtake the coordinator's word
                self.session.poll(force=True)
            if trainer not in self.trainers or identity != msg.sender.encode():
                self.ctx.traffic.drop("unknown_trainer", msg.sender)
                continue
            if msg.type == messages.STATE:
                self._on_state(trainer, msg)
                continue
            reason = messages.request_fields(msg.meta, set(self.names), self.layout.digest)
            if reason is None and msg.type == messages.PUSH:
                names, shapes = msg.meta["names"], self.layout.shapes
                reason = messages.gradients(msg.tensors, names, shapes, msg.chunked)
            if reason is not None:
                self.ctx.traffic.drop(reason, msg.sender)
                continue
            assert identity is not None
            if self.awaiting is not None:  # answered once the shard is rebuilt
                self.held.append((identity, trainer, msg))
                continue
            if self.one_way > 0:  # the request's half of the emulated round trip
                handle = functools.partial(self._handle, identity, trainer, msg)
                self.delay.later(time.monotonic() + self.one_way, handle)
            else:
                self._handle(identity, trainer, msg, answer=False)
        self._answer_pulls()
        # the live view's row: what this shard served so far (at most twice a second)
        pushes, pulls = int(self.stats["pushes"]), int(self.stats["pulls"])
        self.session.progress(0, 0, pushes, pushes=pushes, pulls=pulls)

    def _handle(self, identity: bytes, trainer: int, msg: Message, answer: bool = True) -> None:
        """A checked request, as it arrives over the (emulated) link."""
        if trainer not in self.trainers:  # failed while its request was on the way
            return
        if msg.type == messages.PULL:
            self._on_pull(identity, trainer, msg)
        else:
            self._on_push(identity, trainer, msg)
        if answer:
            self._answer_pulls()

    def _on_pull(self, identity: bytes, trainer: int, msg: Message) -> None:
        it = int(msg.meta["iter"])
        need = it if self.cfg.consistency == "bsp" else max(0, it - self.cfg.staleness)
        self.stats["pulls"] += 1
        pull = _Pull(
            identity,
            trainer,
            it,
            int(msg.meta["seg"]),
            int(msg.meta["req"]),
            list(msg.meta["names"]),
            need,
            time.monotonic(),
        )
        self.parked.append(pull)

    def _on_push(self, identity: bytes, trainer: int, msg: Message) -> None:
        it, names = int(msg.meta["iter"]), list(msg.meta["names"])
        self.stats["pushes"] += 1
        received = msg.received()
        for name in names:
            grad = received[name]
            if self.cfg.consistency == "ssp":
                self._apply_stale(name, it, trainer, grad, msg.sender)
                continue
            reason = self.agg[name].push(it, trainer, grad)
            if reason is not None:
                self.ctx.traffic.drop(reason, msg.sender)
                continue
            while (mean := self.agg[name].ready()) is not None:
                self._apply(name, mean)
        ack = {"iter": it, "seg": int(msg.meta["seg"]), "req": int(msg.meta["req"])}
        reply = functools.partial(self._reply, identity, messages.ACK, ack, {})
        self.delay.later(time.monotonic() + self.one_way, reply)  # the reply's half

    def _apply(self, name: str, grad: np.ndarray) -> None:
        """BSP: apply iteration ``version``'s mean gradient; the version advances by one."""
        self._step(name, grad)
        self.version[name] += 1
        self._maybe_checkpoint()

    def _apply_stale(self, name: str, it: int, trainer: int, grad: Grad, sender: str) -> None:
        """SSP: apply one trainer's gradient now, scaled by 1/K; the version is the slowest
        live trainer's clock."""
        reason = self.clock[name].push(it, trainer)
        if reason is not None:
            self.ctx.traffic.drop(reason, sender)
            return
        full = grad.join() if isinstance(grad, Chunked) else np.asarray(grad, dtype=np.float32)
        self._step(name, full / np.float32(len(self.trainers)))
        self.version[name] = max(self.version[name], self.clock[name].version)
        self._maybe_checkpoint()

    def _step(self, name: str, grad: np.ndarray) -> None:
        tensor = self.tensors[name]
        self.loans.before_update(name, tensor)  # a reply on its way keeps the old values
        scale = survivor_scale(len(self.trainers), len(self.all_trainers), self.cfg.survivor_lr)
        if scale != self._lr_scale:  # fewer trainers than the run's: a smaller step
            self._lr_scale = scale
            for group in self.optimizer.param_groups:
                group["lr"] = self.ctx.recipe.train.lr * scale
        if scale < 1.0:
            self.stats["scaled_updates"] += 1
            self.stats["least_lr_scale"] = min(self.stats["least_lr_scale"], scale)
        tensor.grad = torch.from_numpy(np.ascontiguousarray(grad)).reshape(tensor.shape)
        self.optimizer.step()
        tensor.grad = None
        self.stats["updates"] += 1

    def _dropped(self, failed: set[int]) -> None:
        """Trainers failed: stop waiting for them (their unfinished pushes are discarded)."""
        for t in failed & self.trainers:
            self.trainers.discard(t)
            for name, agg in self.agg.items():
                agg.drop(t)
                while (mean := agg.ready()) is not None:
                    self._apply(name, mean)
            for name, clock in self.clock.items():
                clock.drop(t)
                if self.cfg.consistency == "ssp" and self.trainers:
                    self.version[name] = max(self.version[name], clock.version)
        self.parked = [p for p in self.parked if p.trainer in self.trainers]
        if self.awaiting is not None:
            self.awaiting -= failed
            self.held = [h for h in self.held if h[1] in self.trainers]
            if not self.awaiting:
                self._rebuild()
        self._answer_pulls()

    def _rejoined(self, joined: dict[int, dict[str, str]]) -> None:
        """Trainers that rejoined the run: wait for their pushes again, each tensor from the
        next iteration it applies (their pushes of earlier ones are stale: acknowledged, not
        applied, counted as ``stale_push``)."""
        for t in sorted(set(joined) & (self.all_trainers | self.slots) - self.trainers):
            if t in self.slots:  # a new worker took an open slot: one of the run's from now
                self.slots -= {t}
                self.all_trainers |= {t}
            self.trainers.add(t)
            bsp = [agg.add(t) for agg in self.agg.values()]
            ssp = [clock.add(t) for clock in self.clock.values()]
            at = min(ssp if self.cfg.consistency == "ssp" else bsp, default=0)
            self.rejoins.append({"trainer": t, "iteration": at, "at": time.time()})
            log.info("trainer %d rejoined: its pushes count from iteration %d", t, at)

    # ------------------------------------------------------------------ a rebuilt shard

    def _on_state(self, trainer: int, msg: Message) -> None:
        """A trainer's copy of this shard's tensors; the shard is rebuilt once every live
        trainer's is in (an unusable one counts as no copy)."""
        if self.awaiting is None or trainer not in self.awaiting:
            self.ctx.traffic.drop("unexpected_state", msg.sender)
            return
        self.awaiting.discard(trainer)
        received = msg.received()
        shapes, digest = self.layout.shapes, self.layout.digest
        reason = state_problem(msg.meta, received, set(self.names), shapes, digest)
        if reason is not None:
            self.ctx.traffic.drop(reason, msg.sender)
        else:
            replica = Replica(dict(msg.meta["versions"]), dict(msg.meta["pushed"]))
            self.copies[trainer] = (replica, received)
        if not self.awaiting:
            self._rebuild()

    def _rebuild(self) -> None:
        """Every tensor from the freshest copy, at its version; the optimiser state starts
        again (only the dead shard held it); then the requests held meanwhile."""
        plan = rebuild(self.names, {t: c[0] for t, c in self.copies.items()}, self.version)
        for n, t in plan.source.items():
            arr, out = self.copies[t][1][n], self.tensors[n].detach().numpy()
            if isinstance(arr, Chunked):
                arr.copy_to(out)
            else:
                np.copyto(out, arr)
        self.optimizer = optimizer_for(list(self.tensors.values()), self.ctx.recipe.train)
        self._lr_scale = 1.0
        self.agg = {n: Aggregator(self.trainers, plan.version[n]) for n in self.names}
        self.clock = {}
        for n in self.names:
            clock = StaleClock(self.trainers, plan.version[n])
            clock.pushed.update({t: c for t, c in plan.clocks[n].items() if t in self.trainers})
            self.clock[n] = clock
        ssp = self.cfg.consistency == "ssp"
        self.version = {
            n: max(v, self.clock[n].version) if ssp else v for n, v in plan.version.items()
        }
        taken = [plan.source[n] for n in self.names if n in plan.source]
        versions = list(self.version.values())
        held, self.held = self.held, []
        self.recovery = {
            "source": "trainers",
            "copies": {str(t): taken.count(t) for t in sorted(set(taken))},
            "kept_own": len(self.names) - len(taken),  # nobody held them: checkpoint or initial
            "version": [min(versions, default=0), max(versions, default=0)],
            "wait_s": round(time.monotonic() - self._since, 3),
            "held_requests": len(held),
            "optimizer": "reset",
            "at": time.time(),
        }
        log.info("shard rebuilt from the trainers' copies: %s", self.recovery)
        self.awaiting, self.copies = None, {}
        self._checkpointed = min(self.version.values(), default=0) - 1  # (at a boundary: its part)
        self._maybe_checkpoint()
        for identity, trainer, msg in held:
            self._handle(identity, trainer, msg, answer=False)

    def _answer_pulls(self) -> None:
        now = time.monotonic()
        waiting = []
        for pull in self.parked:
            if all(self.version[n] >= pull.need for n in pull.names):
                lead = pull.it - min(self.version[n] for n in pull.names)
                self.stats["max_lead"] = max(self.stats["max_lead"], lead)
                self._answer(pull, now)
            else:
                waiting.append(pull)
        self.parked = waiting

    def _answer(self, pull: _Pull, now: float) -> None:
        """The weights as they are now, sent after the reply's half of the round trip."""
        held = max(0.0, now - pull.arrived)  # parked, waiting for the version
        self.stats["held_s"] += held
        weights = {n: self.tensors[n].detach().numpy() for n in pull.names}  # lent, no copy
        loan = self.loans.lend(pull.names)
        meta = {
            "iter": pull.it,
            "seg": pull.seg,
            "req": pull.req,
            "held_s": held,
            "version": min(self.version[n] for n in pull.names),
        }
        reply = functools.partial(self._reply, pull.identity, messages.PARAMS, meta, weights, loan)
        self.delay.later(now + self.one_way, reply)

    def _reply(
        self,
        identity: bytes,
        kind: str,
        meta: dict[str, Any],
        tensors: dict[str, np.ndarray],
        loan: Loan | None = None,
    ) -> None:
        """Send a reply; one with a ``loan`` zero-copy, its tensors lent until ZeroMQ is done."""
        assert self.router is not None
        msg = self.transport.message(kind, meta, tensors)
        if loan is None:
            with contextlib.suppress(zmq.ZMQError):  # the trainer is gone: the control plane
                self.transport.send(self.router, msg, identity=identity, flags=zmq.NOBLOCK)
            return
        trackers: list[zmq.MessageTracker] = []
        try:
            _, trackers = self.transport.send_tracked(
                self.router, msg, identity=identity, flags=zmq.NOBLOCK
            )
        except zmq.ZMQError as exc:  # (as above; frames already queued stay lent)
            trackers = list(getattr(exc, "trackers", []))
        self.loans.sent(loan, trackers)

    # ------------------------------------------------------------------ timers, checkpoints

    def _run_timers(self, final: bool = False) -> float:
        """Run every due timer of the emulated link; return the seconds until the next one
        (the serve loop sleeps at most that long). ``final``: run them all now."""
        return self.delay.run_due(time.monotonic(), final)

    def _maybe_checkpoint(self) -> None:
        """At an epoch boundary every checkpoint interval, hand in this shard's part."""
        if not self.iterations or not self.version:
            return
        done = min(self.version.values())
        if done <= self._checkpointed or done % self.iterations:
            return
        self._checkpointed = done
        epoch = done // self.iterations
        if self.session.checkpoint_due(epoch):
            weights = state_arrays(self.tensors, self.optimizer)
            self.session.checkpoint(
                epoch, done, HandIn(weights, {"server": self.ctx.role.index, "version": done})
            )
