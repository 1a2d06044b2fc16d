"""A Mercury device (role ``trainer``): a data-parallel trainer that also serves one shard.

Each iteration t (specs/ps.md §2.1; T1 is this thread, T2 the BACC thread):

1. boundary: received samples enter the local dataset; a resharding round starts if one is
   due (its samples chosen, :mod:`.reshard`);
2. (sequential pipeline) a resharding piece, then the refresh of a fixed group;
3. the minibatch is drawn from the importance cache with its weights (:mod:`.group_sampling`);
4. forward/backward of the weighted loss gives the flat gradient ``g``;
5. ``g``'s slices go to their owners; each owner averages its slice over all devices and
   sends it back (:mod:`.net`, :mod:`.shards`); meanwhile T2 refreshes importance (BACC);
6. once the average is in and T2 stands still (:mod:`.bacc`), the device applies its
   optimiser (Adam by default) to the averaged gradient: every replica takes the same step.

Outside aggregation T2 sends the round's swap chunks (paused when the next aggregation
starts). Every iteration's compute, communication and the rest (``T_is``) are measured for
the speed-up model. Device 0 evaluates (the replicas are identical: the hash check says so).

Every device serves a shard, so a lost device stops every other's averaging. Under ``[run]
restart`` the run *rewinds* (:mod:`edgetrain.comm.rewind`): the others halt where they are,
the launcher restarts the lost one from its part of the last checkpoint, and every device goes
back to its own part (weights, optimiser state, local data, importance cache) with new network
and BACC threads, and trains the epochs since again.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import zmq
from torch import nn

from edgetrain.comm import protocol
from edgetrain.comm.client import Serve
from edgetrain.comm.control import HandIn
from edgetrain.comm.rewind import Rewind
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Message, is_count
from edgetrain.errors import DataError, RunError
from edgetrain.profile.scope import resolve_scope
from edgetrain.ps.mercury import premises, reshard, shards
from edgetrain.ps.mercury.bacc import REFRESH, STOP, SWAP, WAIT, Handoff, Protocol
from edgetrain.ps.mercury.codec import SampleCodec
from edgetrain.ps.mercury.config import MercurySection, Settings, settings
from edgetrain.ps.mercury.group_sampling import (
    ImportanceCache,
    Sampler,
    all_inclusive,
    default_beta,
    uniform_batch,
)
from edgetrain.ps.mercury.importance import Scorer
from edgetrain.ps.mercury.net import Net, SwapAnswer
from edgetrain.runtime.base import Final, Ready, Runner, WorkerContext
from edgetrain.runtime.context import Roster
from edgetrain.runtime.epochs import run_epochs
from edgetrain.runtime.rewind_watch import RewindWatch
from edgetrain.runtime.session import Session
from edgetrain.runtime.setup import build_run_model, load_run_data, worker_indices
from edgetrain.runtime.trainer import evaluate, resolve_device
from edgetrain.runtime.weights import float_state, load_arrays, optimizer_arrays

log = logging.getLogger(__name__)

_SALT_CACHE, _SALT_DRAW, _SALT_ROUND, _SALT_EPOCH, _SALT_PROBE = 0x4D43, 0xD4A, 0x5E, 0xE, 0x9B
EMA = 0.3  # smoothing of the aggregation time for the predictive group size
PROBE_LAGS = (1, 10)
T2_NICE = 19  # T2's scheduling priority (the lowest): it runs on what the others leave
# Python hands the interpreter lock between threads every this many seconds (default 5 ms):
# shorter, so the network thread answers a peer promptly while T2 scores samples
SWITCH_INTERVAL_S = 0.0005


class MercuryRunners:
    """Mercury's runner factory: a lost device's restarted process rejoins the running run by
    rewinding every device to the last checkpoint."""

    rejoins = True
    restarts_roles = frozenset({"trainer"})

    def __call__(self, ctx: WorkerContext) -> Runner:
        return MercuryDevice(ctx)


make_runner = MercuryRunners()


def under_cpu_quota() -> bool:
    """Whether this process runs under a CPU quota (its cgroup's, whatever made it)."""
    scope = resolve_scope("cgroup")
    return scope is not None and scope.share() is not None


def yield_cpu() -> None:
    """Make the calling thread (T2) the last in line for the CPU: the network thread must
    not wait behind importance refreshes, or the refresh lengthens the aggregation it is meant
    to hide in (Linux: a thread's nice value is its own; elsewhere nothing changes)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), T2_NICE)


@dataclass
class Times:
    """Seconds of one epoch's iterations, summed, and what the iterations did."""

    iterations: int = 0
    compute: float = 0.0  # T_cp: forward, backward, optimiser step
    comm: float = 0.0  # T_cm: first slice sent -> last averaged slice in
    total: float = 0.0  # the whole iteration
    refresh_t1: float = 0.0  # refresh on the training thread (sequential, All-IS)
    reshard_t1: float = 0.0  # resharding on the training thread (sequential)
    draw: float = 0.0
    step_wait: float = 0.0  # waiting for T2 to stand still before the step
    boundary: float = 0.0  # placing received samples, planning a round
    cpu: float = 0.0  # the process's CPU time over the iterations (every thread's)
    beta: list[float] = field(default_factory=list)
    bandwidth: list[float] = field(default_factory=list)  # bytes out / T_cm


class MercuryDevice:
    """One Mercury device: runner and epoch work."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        recipe = ctx.recipe
        self.batch = recipe.train.batch_size
        self.cfg: Settings = settings(MercurySection.of(recipe), recipe.train.technique, self.batch)
        self.me = ctx.role.index
        self.seed = recipe.run.seed
        self.router: zmq.SyncSocket | None = None
        self.net: Net | None = None
        self.handoff: Handoff | None = None
        self.t2: threading.Thread | None = None
        self.t2_error: str | None = None
        self.iteration = 0
        self.iterations = 0
        self.round_iterations = 0
        self.stopped = False
        self.times = Times()
        self._last_eval: tuple[float, float] | None = None
        self._lock = threading.Lock()  # the round plan, placements, busy slots
        self._plan: reshard.RoundPlan | None = None
        self._placements: list[reshard.Placement] = []
        self._busy: set[int] = set()
        self._seq = 0
        self._peer_turn = 0
        self._chunks_per_iteration = 0
        self._grad_bytes_before = 0
        self.reshard_stats = {"rounds": 0, "offered": 0, "placed": 0, "answered": 0}
        self._cohort_base = 0
        self._probe: dict[int, np.ndarray] = {}
        self._probe_rows: list[dict[str, Any]] = []
        self._ema_agg: float | None = None
        self.steps = 0  # training steps so far (a checkpoint keeps them)
        self.rewind = RewindWatch(f"device {self.me}")  # a run that rewinds: lost peers halt it
        # the cores this process may use: its CPU quota's, else the machine's (paces the
        # refresh; the report sets the CPU it used against them)
        scope = resolve_scope("auto")
        self.cores = (scope.share() if scope else None) or float(os.cpu_count() or 1)
        # ``auto`` keys: the batch's losses and quota headroom under any CPU quota (an
        # emulated host's group, a container's), the paper's BACC elsewhere
        self.under_quota = under_cpu_quota()
        self.cfg = self.cfg.for_device(self.under_quota)

    # ------------------------------------------------------------------ runner

    def setup(self) -> Ready:
        recipe, ctx = self.ctx.recipe, self.ctx
        group = recipe.expanded_workers()[ctx.worker_id]
        torch.set_num_threads(group.threads)
        self._fresh_state()
        if ctx.resume is not None:
            self._restore(ctx.resume)
        self.router, endpoint = Transport.of(ctx).bind(zmq.ROUTER, what=f"Mercury device {self.me}")
        meta = {"samples": self.cache.size, "params": self.P, "weights_hash": self.weights_hash()}
        return Ready({"mc": endpoint}, meta)

    def _fresh_state(self) -> None:
        """The seeded start: the local data, the model, its optimiser and importance cache."""
        recipe, ctx, cfg = self.ctx.recipe, self.ctx, self.cfg
        data = load_run_data(recipe)
        mine = worker_indices(recipe, data, ctx.worker_id)
        # the dataset stays in host memory (resharding writes into it); batches go to the device
        self.device = resolve_device(recipe.train.device)
        self.model = build_run_model(recipe, data).to(self.device)
        self.codec = SampleCodec.of(data.x_train, data.classes)
        # every sample as the codec carries it (a resharded sample arrives so, a checkpoint
        # keeps it so): the local data of a resumed or rewound device is the same, bit for bit
        self.x_np = np.ascontiguousarray(self.codec.decode(self.codec.encode(data.x_train[mine])))
        self.y_np = np.array(data.y_train[mine], dtype=np.int64, copy=True)
        n = len(self.y_np)
        if n < self.batch:
            raise DataError(
                f"device {self.me} holds {n} samples, fewer than [train] batch_size = {self.batch}",
                "lower the batch, use fewer devices or more data",
            )
        self.x = torch.from_numpy(self.x_np)  # shares memory: placements show at once
        self.y = torch.from_numpy(self.y_np)
        self.x_test = torch.from_numpy(np.ascontiguousarray(data.x_test)).to(self.device)
        self.y_test = torch.from_numpy(np.ascontiguousarray(data.y_test)).to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.P = sum(p.numel() for p in self.params)
        train = recipe.train
        if cfg.optimizer == "adam":
            self.optimizer: torch.optim.Optimizer = torch.optim.Adam(
                self.params, lr=train.lr, betas=(0.9, 0.999), weight_decay=train.weight_decay
            )
        else:
            self.optimizer = torch.optim.SGD(
                self.params, lr=train.lr, momentum=train.momentum, weight_decay=train.weight_decay
            )
        self.scorer = Scorer(self.model, cfg.loss_mode)
        rng = np.random.default_rng([self.seed, _SALT_CACHE, self.me])
        self.cache = ImportanceCache.fresh(n, cfg.initial_importance, rng)
        self.steps = 0

    def run(self, session: Session) -> Final:
        recipe, ctx = self.ctx.recipe, self.ctx
        self.session = session
        devices = session.roster.of("trainer")
        self.K = len(devices)
        self.apply(session.start_directive)
        sizes = session.start_directive.get("sizes")
        if not isinstance(sizes, list) or len(sizes) != self.K:
            raise RunError(f"device {self.me}: the start directive has no sizes for {self.K}")
        self.sizes = [int(s) for s in sizes]
        self.bounds = shards.bounds(self.P, self.K)
        first = session.rejoin_epoch or ctx.start_epoch
        self.iteration = (first - 1) * self.iterations
        if session.rejoin_epoch is None:
            self.steps = 0  # a resumed run counts its steps from its start, as before
        self._start_net(session.roster, session.gen)
        self._start_t2()
        if self.rewind.watch(session, "trainer"):
            # A peer's new connection (a restarted process, or a rewound thread's) takes over
            # its identity: without this the ROUTER refuses it while the old connection still
            # holds messages this device never read (sent before the halt), and the two
            # devices never hear each other again.
            assert self.router is not None
            self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        while True:
            try:
                steps = run_epochs(
                    session, self, epochs=recipe.train.epochs, start_epoch=first,
                    eval_every=recipe.train.eval_every, worker_id=ctx.worker_id,
                    first_steps=self.steps,
                )  # fmt: skip
                acc, loss = self._last_eval if self._last_eval is not None else self.evaluate()
                final_hash = self.weights_hash()
                # the threads stop once every device is done: a peer's swap chunk still on its
                # way to this device is answered, or that peer's last step waits on it
                session.done({"weights_hash": final_hash}, recipe.train.epochs, steps)
                self._stop_threads()
                break
            except Rewind:  # a device was lost and comes back: every device rewinds
                first = self._rewind(session)
        weights = {k: v.detach().cpu().numpy().copy() for k, v in float_state(self.model).items()}
        meta = {"device": self.me, "weights_hash": final_hash, "iteration": self.iteration}
        metrics = {
            "final_test_accuracy": acc,
            "final_test_loss": loss,
            "steps": steps,
            "weights_hash": final_hash,
            "rewinds": self.rewind.rewinds,
            "rewound_s": self.rewind.rewound_s,
            **ctx.traffic.as_dict(),
        }
        return Final(HandIn(weights, meta), metrics)

    def _start_net(self, roster: Roster, gen: int) -> None:
        """The network thread, to the devices' endpoints in ``roster``, of generation ``gen``."""
        devices = roster.of("trainer")
        names = {m.role.index: protocol.worker_name(m.id) for m in devices}
        endpoints = {m.role.index: m.endpoints.get("mc", "") for m in devices}
        cfg = self.cfg
        assert self.router is not None
        self.net = Net(
            transport=Transport.of(self.ctx), router=self.router, me=self.me, names=names,
            endpoints=endpoints, bounds=self.bounds, weights=shards.device_weights(self.sizes),
            timeout_s=cfg.reply_timeout_s, codec=self.codec.digest,
            swap_check=lambda t: self.codec.check(t, self.codec.per_chunk(cfg.chunk_bytes)),
            swap_server=self._serve_swap, first_iteration=self.iteration, gen=gen,
        )  # fmt: skip
        self.net.start()

    # ------------------------------------------------------------------ rewinds

    def _rewind(self, session: Session) -> int:
        """Stop the threads, halt, and once the coordinator rewinds go back to this device's
        part of the checkpoint (None: the seeded start) with new threads; the epoch to train
        next."""
        t0 = time.monotonic()
        log.info("device %d: a device was lost; halting for the rewind", self.me)
        self._stop_threads()
        self.t2_error = None
        rewound = self.rewind.halt(session)
        if rewound.handin is None:
            self._fresh_state()
        else:
            self._restore(rewound.handin)
        self._forget_progress()
        self.iteration = rewound.epoch * self.iterations
        self._start_net(rewound.roster, rewound.gen)
        self._start_t2()
        self.rewind.count(time.monotonic() - t0)
        log.info("device %d: rewound to epoch %d (gen %d)", self.me, rewound.epoch, rewound.gen)
        return rewound.epoch + 1

    def _forget_progress(self) -> None:
        """What the epochs a rewind throws away left: the resharding round in flight, the
        measured times, the last evaluation."""
        with self._lock:
            self._plan, self._placements, self._busy = None, [], set()
        self._peer_turn = self._chunks_per_iteration = self._cohort_base = 0
        self.stopped = False
        self._last_eval = None
        self.times = Times()
        self._ema_agg = None
        self._probe, self._probe_rows = {}, []

    def close(self) -> None:
        self._stop_threads()
        if self.router is not None:
            self.router.close(linger=500)
            self.router = None

    def _stop_threads(self) -> None:
        if self.handoff is not None:
            self.handoff.stop()
        if self.net is not None:
            self.net.stop()
            self.net = None
        if self.t2 is not None:
            self.t2.join(timeout=30)
            self.t2 = None

    # ------------------------------------------------------------------ the BACC thread

    def _start_t2(self) -> None:
        cfg = self.cfg
        refresh = cfg.sampling == "groupwise"
        swaps = cfg.resharding != "none" and self.K > 1
        if not cfg.threads or not (refresh or swaps):
            return
        proto = Protocol(
            anytime=cfg.group_size == "anytime",
            pause_swaps=cfg.scheduler == "bacc",
            slot_s=cfg.reshard_slot_ms / 1000.0,
            refresh=refresh,
            limit=self.cache.size,
        )
        share = None
        if cfg.pace_refresh and proto.anytime and refresh:
            share = self.cores * float(cfg.pace_utilisation)  # resolved: for_device
        self.handoff = Handoff(proto, share=share)
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self.t2 = threading.Thread(target=self._t2_loop, daemon=True, name="mercury-t2")
        self.t2.start()

    def _t2_loop(self) -> None:
        handoff = self.handoff
        assert handoff is not None
        yield_cpu()
        while True:
            action = handoff.next(timeout=1.0)
            if action.kind == STOP:
                return
            if action.kind == WAIT:
                continue
            samples, cpu_s = 0, 0.0
            try:
                if action.kind == REFRESH:
                    p = handoff.p
                    size = self.cfg.refresh_chunk
                    if not p.anytime:
                        size = max(1, min(size, p.target - p.done_samples))
                    else:  # at most the local dataset per iteration
                        size = max(1, min(size, p.room()))
                    cpu0 = time.thread_time()
                    samples = self._refresh(size, action.iteration)
                    cpu_s = time.thread_time() - cpu0
                elif action.kind == SWAP:
                    self._swap_chunk()
            except Exception as exc:  # noqa: BLE001 - the training thread reports it
                self.t2_error = f"device {self.me}'s BACC thread failed: {exc}"
                log.exception("mercury T2")
                handoff.finished(action, samples)
                handoff.stop()
                return
            handoff.finished(action, samples, cpu_s if action.kind == REFRESH else None)

    # ------------------------------------------------------------------ importance

    def _refresh(self, size: int, t: int) -> int:
        """Score the next ``size`` samples of the refresh order; stamp them ``t`` (with
        ``batch_refresh``, no stamp: the cache stays one group)."""
        idx = self.cache.next_chunk(size)
        sel = torch.from_numpy(idx)
        losses = self.scorer.losses(*self._batch(sel))
        if self.cfg.batch_refresh:  # one group: every score is kept without a stamp
            self.cache.rescore(idx, losses)
        else:
            self.cache.store(idx, losses, t)
        return len(idx)

    def _refresh_t1(self, count: int, t: int) -> int:
        done = 0
        while done < count:
            done += self._refresh(min(self.cfg.refresh_chunk, count - done), t)
        return done

    def fixed_group(self) -> int:
        return math.ceil(self.cache.size / self.cfg.groups)

    def _beta(self) -> float:
        if self.cfg.beta is not None:
            return self.cfg.beta
        if self.cfg.group_size == "fixed" or self.handoff is None:
            mean = float(self.fixed_group())
        else:
            recent = [c for c in self.handoff.p.stats.cohorts[-50:] if c > 0]
            mean = float(np.mean(recent)) if recent else float(self.cfg.refresh_chunk)
        return default_beta(self.cache.size, mean)

    def _draw(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        cfg, n = self.cfg, self.cache.size
        rng = np.random.default_rng([self.seed, _SALT_DRAW, self.me, t])
        if cfg.sampling == "uniform":
            return uniform_batch(n, self.batch, t, [self.seed, _SALT_EPOCH, self.me])
        if cfg.sampling == "all":
            return all_inclusive(self.cache.importance, self.batch, cfg.smoothing, rng)
        beta = self._beta()
        self.times.beta.append(beta)
        sampler = Sampler.of(self.cache.importance, self.cache.stamp, t, beta, cfg.smoothing)
        return sampler.draw(self.batch, cfg.slots, rng, cfg.weights)

    # ------------------------------------------------------------------ resharding

    def _initiates(self) -> list[int]:
        return [
            j for j in range(self.K) if j != self.me and reshard.initiator(self.me, j) == self.me
        ]

    def _boundary(self, t: int) -> None:
        """Received samples enter the dataset; a resharding round starts when one is due."""
        with self._lock:
            placements, self._placements = self._placements, []
        for p in placements:
            reshard.apply(self.x_np, self.y_np, self.cache.importance, p)
            with self._lock:
                self._busy.difference_update(int(s) for s in p.slots)
            self.reshard_stats["placed"] += len(p.slots)
        cfg = self.cfg
        if cfg.resharding == "none" or self.K < 2 or t < 1:
            return
        R = self.round_iterations
        if (t - 1) % R:
            return
        r = (t - 1) // R
        n = self.cache.size
        n_p = int(cfg.reshard_fraction * n)
        if isinstance(cfg.reshard_budget, float):
            budget = int(cfg.reshard_budget * n_p)
        else:
            bw = float(np.median(self.times.bandwidth[-20:])) if self.times.bandwidth else 0.0
            per_it = self.times.compute / max(1, self.times.iterations)
            budget = reshard.bandwidth_budget(n_p, bw, per_it, R, self.codec.sample_bytes)
        count = reshard.outgoing(cfg.resharding, n, cfg.reshard_fraction, budget)
        rng = np.random.default_rng([self.seed, _SALT_ROUND, self.me, r])
        with self._lock:
            busy = np.fromiter(self._busy, dtype=np.int64)
        chosen = reshard.choose(
            self.cache.importance, self.cache.stamp, count, cfg.resharding, cfg.smoothing, rng,
            busy,
        )  # fmt: skip
        peers = [j for j in range(self.K) if j != self.me]
        plan = reshard.RoundPlan.split(r, chosen, peers, rng)
        with self._lock:
            self._plan = plan
        self.reshard_stats["rounds"] += 1
        self.reshard_stats["offered"] += plan.offered
        mine = sum(len(plan.lists[j]) for j in self._initiates())
        per_chunk = self.codec.per_chunk(cfg.chunk_bytes)
        self._chunks_per_iteration = math.ceil(math.ceil(mine / per_chunk) / R) if mine else 0
        assert self.net is not None
        self.net.retry_parked()
        if self.handoff is not None:
            self.handoff.set_swap_work(mine > 0)

    def _next_peer(self, plan: reshard.RoundPlan) -> int | None:
        peers = self._initiates()
        for i in range(len(peers)):
            j = peers[(self._peer_turn + i) % len(peers)]
            if plan.remaining(j) > 0:
                self._peer_turn = (self._peer_turn + i + 1) % len(peers)
                return j
        return None

    def _swap_chunk(self) -> bool:
        """Send one chunk of the round to the next peer this device initiates with, place
        its answer at the next boundary; False when the round has nothing left to send."""
        net = self.net
        assert net is not None
        with self._lock:
            plan = self._plan
            peer = self._next_peer(plan) if plan is not None else None
            if plan is None or peer is None:
                self._no_swap_work(plan)
                return False
            slots = plan.take(peer, self.codec.per_chunk(self.cfg.chunk_bytes))
            self._busy.update(int(s) for s in slots)
            seq = self._seq
            self._seq += 1
            tensors = self.codec.pack(
                self.x_np[slots], self.y_np[slots], self.cache.importance[slots],
                self.cache.stamp[slots],
            )  # fmt: skip
        answer = net.swap(peer, plan.round, seq, tensors)
        got = len(answer.tensors["y"])
        with self._lock:
            kept = plan.settle(peer, slots, got)
            self._busy.difference_update(int(s) for s in slots[got:])
            if got:
                self._placements.append(self._placement(kept, answer.tensors, got))
            self.reshard_stats["answered"] += got
            left = any(plan.remaining(j) > 0 for j in self._initiates())
            if not left:
                self._no_swap_work(plan)
        return left

    def _no_swap_work(self, plan: reshard.RoundPlan | None) -> None:
        """(Under the lock.) The round ``plan`` has nothing left to send: T2 waits, unless a
        newer round was planned meanwhile."""
        if self.handoff is not None and self._plan is plan:
            self.handoff.set_swap_work(False)

    def _placement(
        self, slots: np.ndarray, tensors: Mapping[str, np.ndarray], count: int
    ) -> reshard.Placement:
        return reshard.Placement(
            np.asarray(slots, dtype=np.int64),
            self.codec.decode(tensors["x"][:count]),
            np.asarray(tensors["y"][:count], dtype=np.int64),
            np.asarray(tensors["imp"][:count], dtype=np.float64),
        )

    def _serve_swap(self, peer: int, msg: Message) -> SwapAnswer | None:
        """The net thread's answer to a peer's chunk: as many of this device's own samples
        for that pair (fewer once its list is used up); None until this device has planned
        the chunk's round."""
        r, asked = int(msg.meta["round"]), len(msg.tensors["y"])
        with self._lock:
            plan = self._plan
            slots = plan.answer(peer, r, asked) if plan is not None else None
            if slots is None:
                return None
            give = len(slots)
            self._busy.update(int(s) for s in slots)
            if give:
                self._placements.append(self._placement(slots, msg.tensors, give))
            tensors = self.codec.pack(
                self.x_np[slots], self.y_np[slots], self.cache.importance[slots],
                self.cache.stamp[slots],
            )  # fmt: skip
        self.reshard_stats["answered"] += give
        meta = {"round": r, "seq": int(msg.meta["seq"]), "codec": self.codec.digest}
        return tensors, meta

    # ------------------------------------------------------------------ one iteration

    def _iterate(self) -> float:
        cfg, t, net = self.cfg, self.iteration, self.net
        assert net is not None
        handoff = self.handoff
        if handoff is not None:
            handoff.hold(False)
            handoff.mark()
        start = time.perf_counter()
        cpu0 = time.process_time()
        self._boundary(t)
        after_boundary = time.perf_counter()
        if cfg.scheduler == "sequential" and self._chunks_per_iteration:
            for _ in range(self._chunks_per_iteration):
                if not self._swap_chunk():
                    break
        after_reshard = time.perf_counter()
        if cfg.sampling == "all":
            self._refresh_t1(self.cache.size, t)
        elif cfg.sampling == "groupwise" and handoff is None:
            self._refresh_t1(self.fixed_group(), t)
        self._premise_probe(t)
        after_refresh = time.perf_counter()
        idx, w = self._draw(t)
        after_draw = time.perf_counter()
        loss, grad, per = self._gradient(idx, w)
        scored = self._batch_refresh(idx, per)
        computed = time.perf_counter()
        weights_hash = self.weights_hash() if t % cfg.hash_every == 0 else None
        sent_before = net.stats.grad_bytes
        net.push(t, grad, weights_hash)
        if handoff is not None:
            handoff.begin(t, self._refresh_target(), scored)
        avg = net.wait_average(t, self.session.poll)  # a lost peer rewinds
        averaged = time.perf_counter()
        if handoff is not None:
            handoff.end(t)
            while not handoff.wait_step(timeout=1.0):
                self.session.poll()
                if self.t2_error is not None or handoff.p.stopped:
                    raise RunError(self.t2_error or f"device {self.me} is stopping")
        stepping = time.perf_counter()
        self._step(avg)
        end = time.perf_counter()
        comm = averaged - computed
        times = self.times
        times.iterations += 1
        times.compute += (computed - after_draw) + (end - stepping)
        times.comm += comm
        times.total += end - start
        times.cpu += time.process_time() - cpu0
        times.boundary += after_boundary - start
        times.reshard_t1 += after_reshard - after_boundary
        times.refresh_t1 += after_refresh - after_reshard
        times.draw += after_draw - after_refresh
        times.step_wait += stepping - averaged
        if comm > 0:
            times.bandwidth.append((net.stats.grad_bytes - sent_before) / comm)
        self._ema_agg = comm if self._ema_agg is None else EMA * comm + (1 - EMA) * self._ema_agg
        self.iteration += 1
        return loss

    def _refresh_target(self) -> int:
        cfg = self.cfg
        if cfg.group_size == "fixed":
            return self.fixed_group()
        if cfg.group_size == "predict" and self.handoff is not None:
            st = self.handoff.p.stats
            rate = st.refreshed / st.refresh_s if st.refresh_s > 0 else 0.0
            want = round((self._ema_agg or 0.0) * rate)
            return int(min(self.cache.size, max(cfg.refresh_chunk, want)))
        return 0

    def _batch_refresh(self, idx: np.ndarray, losses: torch.Tensor) -> bool:
        """The batch's own losses (the iteration's weights, the scorer's mode) as the drawn
        samples' importance: a rescoring that costs nothing. With ``batch_refresh`` no score
        is stamped (T2's neither), so the cache is one group and a draw is importance sampling
        over the whole local dataset by each sample's last score: the paper's cohorts need a
        refresh that keeps up, and a device without spare CPU leaves only slivers of a few
        samples, whose draws carry weights of about 10. Whether it rescored (False when
        ``batch_refresh`` is off)."""
        if not self.cfg.batch_refresh or not self.scorer.as_training:
            return False
        with self._lock:  # swaps read the importance of the samples they send
            self.cache.rescore(idx, losses.cpu().numpy())  # a sample drawn twice: one loss
        return True

    def _gradient(self, idx: np.ndarray, w: np.ndarray) -> tuple[float, np.ndarray, torch.Tensor]:
        model = self.model
        model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sel = torch.from_numpy(np.asarray(idx, dtype=np.int64))
        xb, yb = self._batch(sel)
        per = nn.functional.cross_entropy(model(xb), yb, reduction="none")
        weights = torch.from_numpy(np.asarray(w, dtype=np.float32)).to(self.device)
        (weights * per).sum().div(len(idx)).backward()
        grads = [
            p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), device=p.device)
            for p in self.params
        ]
        flat = torch.cat(grads).detach().cpu().numpy().astype(np.float32, copy=False)
        return float(per.detach().mean()), np.ascontiguousarray(flat), per.detach()

    def _batch(self, sel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples ``sel`` of the local dataset on the model's device (no copy on the CPU)."""
        return self.x[sel].to(self.device), self.y[sel].to(self.device)

    def _step(self, avg: np.ndarray) -> None:
        flat = torch.from_numpy(avg)
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).to(p.device)
            offset += n
        self.optimizer.step()

    def weights_hash(self) -> str:
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1).cpu() for p in self.params]).numpy()
        return shards.weights_hash(flat)

    def _premise_probe(self, t: int) -> None:
        """R-M7 on device 0: a fixed subset scored at each probe iteration and 1 and 10
        iterations after it; the rank moves and the top-10% loss share."""
        if self.me != 0 or not self.cfg.premise_probe:
            return
        probes = self.cfg.premise_probe
        due = [p for p in probes if t - p in (0, *PROBE_LAGS)]
        if not due:
            return
        n = min(self.cfg.premise_samples, self.cache.size)
        subset = np.random.default_rng([self.seed, _SALT_PROBE]).permutation(self.cache.size)[:n]
        sel = torch.from_numpy(subset)
        losses = self.scorer.losses(*self._batch(sel))
        for p in due:
            if t == p:
                self._probe[p] = losses
                self._probe_rows.append(
                    {"iteration": p, "lag": 0, "top10_share": premises.top_share(losses)}
                )
            elif p in self._probe:
                moves = premises.rank_moves(self._probe[p], losses)
                self._probe_rows.append({"iteration": p, "lag": t - p, **moves})

    # ------------------------------------------------------------------ EpochWork

    def batches(self, epoch: int) -> Iterator[int]:
        """This epoch's iterations (none once the run reached its stop accuracy)."""
        if self.stopped:
            return
        yield from range(self.iterations)

    def step(self, epoch: int, batch: Any) -> float:
        loss = self._iterate()
        self.steps += 1
        return loss

    def evaluate(self) -> tuple[float, float]:
        """Device 0's test accuracy and loss; the other devices report none (the replicas
        are identical, and evaluation stays outside the training clock either way)."""
        if self.stopped and self._last_eval is not None:
            return self._last_eval
        if self.me != 0:
            return math.nan, math.nan
        self._last_eval = evaluate(self.model, self.x_test, self.y_test)
        return self._last_eval

    def metrics(self) -> dict[str, Any]:
        """The epoch's terms of the speed-up model (sums, and the iterations they cover),
        refresh and resharding figures, the replica hash."""
        if self.handoff is not None:
            self.handoff.hold(True)  # evaluation and the barrier are not training time
        t, out = self.times, {}
        st = self.handoff.p.stats if self.handoff is not None else None
        cohorts = st.cohorts[self._cohort_base :] if st is not None else []
        if st is not None:
            self._cohort_base = len(st.cohorts)
        net = self.net
        out = {
            "mercury": True,
            "device": self.me,
            "iterations": t.iterations,
            "t_cp_s": t.compute,
            "t_cm_s": t.comm,
            "t_it_s": t.total,
            "t_is_s": max(0.0, t.total - t.compute - t.comm),
            "refresh_t1_s": t.refresh_t1,
            "reshard_t1_s": t.reshard_t1,
            "draw_s": t.draw,
            "step_wait_s": t.step_wait,
            "boundary_s": t.boundary,
            "cpu_s": t.cpu,
            "cores": self.cores,
            "under_quota": self.under_quota,
            "batch_refresh": self.cfg.batch_refresh,  # ``auto`` resolved on this device
            "pace_utilisation": self.cfg.pace_utilisation,
            "beta": float(np.mean(t.beta)) if t.beta else self.cfg.beta,
            "bandwidth_Bps": float(np.median(t.bandwidth)) if t.bandwidth else None,
            "cohort_mean": float(np.mean(cohorts)) if cohorts else None,
            "cohort_min": int(min(cohorts)) if cohorts else None,
            "cohort_max": int(max(cohorts)) if cohorts else None,
            "refreshed_total": self.cache.refreshed(),
            "t2_refreshed": st.refreshed if st else 0,
            "t2_refresh_s": st.refresh_s if st else 0.0,
            "t2_swaps": st.swaps if st else 0,
            "t2_swap_s": st.swap_s if st else 0.0,
            "t2_paced": st.paced if st else 0,
            "t2_paced_s": st.paced_s if st else 0.0,
            "pace_share": self.handoff.share if self.handoff is not None else None,
            "pause_latency_max_s": st.pause_latency_max_s if st else None,
            "pause_latency_mean_s": st.pause_latency_s / st.pauses if st and st.pauses else None,
            "reshard_rounds": self.reshard_stats["rounds"],
            "reshard_offered": self.reshard_stats["offered"],
            "reshard_placed": self.reshard_stats["placed"],
            "reshard_bytes_sent": net.stats.swap_bytes_sent if net else 0,
            "grad_bytes_sent": net.stats.grad_bytes if net else 0,
            "hash_checks": net.stats.hash_checks if net else 0,
            "weights_hash": self.weights_hash(),
            "samples": self.cache.size,
            "premises": list(self._probe_rows),
        }
        self._probe_rows = []
        self.times = Times(bandwidth=t.bandwidth[-20:])
        return out

    def checkpoint(self) -> HandIn:
        """Weights, optimiser state, the local dataset (raw bytes) and the importance cache."""
        weights = {k: v.detach().cpu().numpy().copy() for k, v in float_state(self.model).items()}
        weights.update(optimizer_arrays(self.optimizer))
        weights["mercury.x"] = self.codec.encode(self.x_np)
        weights["mercury.y"] = self.y_np.copy()
        weights["mercury.importance"] = self.cache.importance.copy()
        weights["mercury.stamp"] = self.cache.stamp.copy()
        weights["mercury.order"] = self.cache.order.copy()
        meta = {
            "device": self.me,
            "iteration": self.iteration,
            "cursor": self.cache.cursor,
            "steps": self.steps,
        }
        return HandIn(weights, meta)

    def _restore(self, handin: HandIn) -> None:
        arrays = handin.weights
        state = float_state(self.model)
        load_arrays(state, arrays, self.optimizer, what=f"device {self.me}'s checkpoint")
        need = ("mercury.x", "mercury.y", "mercury.importance", "mercury.stamp", "mercury.order")
        if not all(k in arrays for k in need):
            raise RunError(f"device {self.me}'s checkpoint lacks its local data")
        x, y = np.asarray(arrays["mercury.x"]), np.asarray(arrays["mercury.y"])
        if x.dtype != np.uint8 or x.shape != self.x_np.shape[:1] + self.codec.shape:
            raise RunError(f"device {self.me}'s checkpoint holds images of another shape")
        self.x_np[:] = self.codec.decode(x)
        self.y_np[:] = y
        self.cache.importance[:] = arrays["mercury.importance"]
        self.cache.stamp[:] = arrays["mercury.stamp"]
        self.cache.order[:] = arrays["mercury.order"]
        self.cache.cursor = int(handin.meta.get("cursor", 0))
        steps = handin.meta.get("steps", 0)
        self.steps = steps if isinstance(steps, int) and is_count(steps) else 0

    def apply(self, directive: Mapping[str, Any]) -> None:
        if "iterations" in directive:
            self.iterations = int(directive["iterations"])
        if "round_iterations" in directive:
            self.round_iterations = max(1, int(directive["round_iterations"]))
        if directive.get("stop"):
            self.stopped = True

    def serve(self) -> Serve:
        return []  # the network thread serves the peers on its own
