"""Coordinator: the control plane of a run, for any family.

Everything goes over one ROUTER socket. The coordinator decides nothing about training: it moves
workers through the phases of :mod:`edgetrain.comm.protocol`, asks the family's
:class:`~edgetrain.comm.control.Controller` for per-worker directives at start, at each epoch
barrier and at drain, collects checkpoints and final hand-ins without looking inside them,
notices workers that stop heartbeating, resends what a worker has not acknowledged, and hands
every event to the caller as plain data. Whether a run can go on without a failed worker is
the caller's policy (:attr:`failed_fraction`, :attr:`fatal_failures`).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import zmq

from edgetrain.comm import activity, channel, protocol, sockets
from edgetrain.comm.channel import Traffic
from edgetrain.comm.control import (
    Controller,
    ControlLog,
    CoordinationPolicy,
    Decision,
    Event,
    HandIn,
    NoDirectives,
    Role,
    Sent,
)
from edgetrain.comm.rejoin import VACANT, entry_epoch, register_verdict
from edgetrain.comm.rewind import can_rewind, gen_of, rewind_epoch
from edgetrain.comm.security import CurveKeys
from edgetrain.comm.wire import DEFAULT_LIMITS, Limits, Message

log = logging.getLogger(__name__)

# A worker is failed after this many heartbeat intervals without a word from it; an
# unacknowledged control message is resent after as many.
MISSED_HEARTBEATS = 3
# A worker setting up its role (between ``welcome`` and ``ready``: loading data, building the
# model, creating its CUDA context) may be silent this long: a native call that holds the
# interpreter lock there (CUDA's initialisation does, for seconds, more on a small board)
# stops its heartbeat thread too, and slow start-up is not a lost worker. A worker that dies
# there is noticed by its launcher at once; one hung there, after this.
SETUP_GRACE_S = 120.0
# A hand-in's or a report's metadata larger than this (as JSON) is refused: framing, not content.
MAX_META_BYTES = 64 * 1024
MAX_ENDPOINTS = 16

Status = Literal["pending", "registered", "ready", "running", "done", "final", "failed"]
Phase = Literal["registering", "training", "draining", "finished", "stopped"]


def silence_limit(status: str, heartbeat_s: float) -> float:
    """Seconds a worker in ``status`` may be silent before it is lost. Pure."""
    limit = MISSED_HEARTBEATS * heartbeat_s
    return max(limit, SETUP_GRACE_S) if status == "registered" else limit


def bulk_until(heard_at: float, doing: dict[str, Any] | None, arrived: float = 0.0) -> float | None:
    """Until when (monotonic) a heartbeat heard at ``heard_at`` that says ``doing`` excuses
    its worker's silence: its announced bulk send's start plus
    :func:`~edgetrain.comm.activity.transfer_s`. None without one, or when the send began
    before ``arrived``, when its worker's last bulk message came (a late heartbeat of a send
    already here). Pure."""
    if doing is None or "sending" not in doing:
        return None
    began = heard_at - float(doing["sending_for_s"])
    return None if began <= arrived else began + activity.transfer_s(int(doing["sending"]))


@dataclass
class WorkerInfo:
    """What the coordinator knows of one worker."""

    id: int
    role: Role
    host: str = ""
    pid: int | None = None
    endpoints: dict[str, str] = field(default_factory=dict)
    status: Status = "pending"
    epoch: int = 0
    ready: dict[str, Any] = field(default_factory=dict)
    done: dict[str, Any] = field(default_factory=dict)
    last_seen: float = 0.0
    error: str | None = None
    error_kind: str | None = None
    # what its last heartbeat said it was doing (:mod:`edgetrain.comm.activity`), and when
    activity: dict[str, Any] | None = None
    activity_at: float | None = None
    # until when (monotonic) its last announced bulk send excuses its silence, and when its
    # last bulk message (a hand-in) arrived
    bulk_until: float = 0.0
    bulk_arrived: float = 0.0

    @property
    def label(self) -> str:
        """``worker 3 (host b)`` for a trainer; ``server 0 (worker 3, host b)`` otherwise."""
        where = f", host {self.host}" if self.host else ""
        if self.role.name == "trainer":
            return f"worker {self.id} (host {self.host})" if self.host else f"worker {self.id}"
        return f"{self.role.name} {self.role.index} (worker {self.id}{where})"


@dataclass(frozen=True)
class Resume:
    """Where a resumed run starts: the last checkpointed epoch and each worker's hand-in."""

    epoch: int
    handins: dict[int, HandIn]


class Coordinator:
    """Drives the workers of one run through registration, training, draining and stop."""

    def __init__(
        self,
        run_id: str,
        recipe: dict[str, Any],
        roles: Sequence[Role],
        policy: CoordinationPolicy | None = None,
        controller: Controller | None = None,
        bind_host: str = "127.0.0.1",
        announce_host: str | None = None,
        context: zmq.SyncContext | None = None,
        heartbeat_s: float = 1.0,
        resume: Resume | None = None,
        security: CurveKeys | None = None,
        epochs: int | None = None,
        placement: Mapping[int, Mapping[str, Any]] | None = None,
        secret: str | None = None,
        limits: Limits = DEFAULT_LIMITS,
        rejoin: bool = False,
        vacant: Collection[int] = (),
    ) -> None:
        """With ``secret`` (the launcher always gives one), a message counts only if it carries
        its worker's token (:func:`protocol.auth_token`); ``limits`` bound what is taken in.
        With ``rejoin`` (``[run] restart > 0``), a lost worker that registers again while the
        run trains is taken back (:mod:`edgetrain.comm.rejoin`). Workers in ``vacant`` are
        open slots (``[run] join_slots``): counted as left from the start (kind ``vacant``, in
        no failure budget) until a new worker joins one, as a lost worker comes back."""
        self.run_id = run_id
        self.recipe = recipe
        self.num_workers = len(roles)
        self.policy = policy or CoordinationPolicy()
        self.controller: Controller = controller or NoDirectives()
        self.heartbeat_s = heartbeat_s
        self.resume = resume
        self.epochs = epochs
        self.placement = {i: dict(p) for i, p in (placement or {}).items()}
        self.traffic = Traffic()
        self.limits = limits
        self.workers = {i: WorkerInfo(i, role) for i, role in enumerate(roles)}
        for i in vacant:
            slot = self.workers[i]
            slot.status, slot.error_kind = "failed", VACANT
            slot.error = "an open slot: nobody has joined it (edgetrain join)"
        self._tokens: dict[int, bytes] | None = None
        if secret is not None:
            self._tokens = {
                i: protocol.auth_token(secret, run_id, i).encode() for i in self.workers
            }
        # Where each worker's main socket is: the identity that last sent an accepted message.
        self._routes: dict[int, bytes] = {}
        self._stopped_failed: set[int] = set()  # lost workers told to stop when they spoke again
        self.rejoin = rejoin
        self.start_directives: dict[int, dict[str, Any]] = {}  # each worker's, at start
        # Lost workers that registered again and wait to re-enter (not alive until they do).
        self.joining: set[int] = set()
        # Called with a rejoining worker: the run's last checkpoint point for it (epoch and
        # hand-in), its fallback when no peer gives it the live model; None: there is none.
        self.rejoin_state: Callable[[int], tuple[int, HandIn] | None] | None = None
        # Called with a worker that stopped heartbeating, just before it is declared lost: the
        # launcher captures its stacks there and returns where they are (None: nothing).
        self.on_silent: Callable[[int], str | None] | None = None
        self.finals: dict[int, HandIn] = {}
        # Complete checkpoints (every alive checkpointing worker's part), for the caller.
        self.checkpoints: dict[int, dict[int, HandIn]] = {}
        self.phase: Phase = "registering"
        self.halted: str | None = None
        self.control = ControlLog(MISSED_HEARTBEATS * heartbeat_s)
        self._epoch_ends: dict[int, dict[int, dict[str, Any]]] = {}
        self._barrier_since: dict[int, float] = {}
        self._partial: dict[int, dict[int, HandIn]] = {}
        self._last_checkpoint = 0  # the latest epoch whose checkpoint completed
        # Rewinds (policy.rewinds with rejoin): the generation (rewinds so far), whether one is
        # pending (an epoch-role worker was lost), the survivors that halted for it, and the
        # checkpoint epoch each rejoining worker was welcomed with.
        self.gen = 0
        self._rewinding = False
        self._rewind_since = 0.0
        self._halted: set[int] = set()
        self._welcomed_at: dict[int, int | None] = {}
        self._phase_since = time.monotonic()
        self._stopped = False
        self._ctx = context or zmq.Context.instance()
        self._sock = sockets.server(
            self._ctx, zmq.ROUTER, security, sockets.bounded(sockets.DEFAULT, limits)
        )
        try:
            self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
            # A worker whose connection was replaced (a new socket, the same identity) takes its
            # identity over at once instead of being ignored until the old one times out.
            self._sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
            self.endpoint = channel.bind_random(
                self._sock, bind_host, announce_host, what="coordinator"
            )
        except BaseException:
            self._sock.close(linger=0)
            raise

    # ------------------------------------------------------------------ public

    def poll(self, timeout_ms: int) -> list[Event]:
        """Wait up to ``timeout_ms`` for messages, handle all that wait, then check heartbeats
        and resend what stays unacknowledged."""
        events: list[Event] = []
        if self._sock.poll(timeout_ms, zmq.POLLIN):
            while True:
                got = channel.recv(
                    self._sock, self.run_id, protocol.TO_COORDINATOR, self.traffic, router=True,
                    limits=self.limits,
                )  # fmt: skip
                if got is not None:
                    identity, msg = got
                    events.extend(self._handle(identity or b"", msg))
                if not self._sock.poll(0, zmq.POLLIN):
                    break
        now = time.monotonic()
        events.extend(self.check_heartbeats(now))
        self.resend_stale(now)
        return events

    def _alive(self, roles: frozenset[str] | None = None) -> list[int]:
        return [
            i
            for i, w in self.workers.items()
            if w.status != "failed"
            and i not in self.joining
            and (roles is None or w.role.name in roles)
        ]

    @property
    def alive(self) -> list[int]:
        return self._alive()

    @property
    def failed(self) -> list[int]:
        return [i for i, w in self.workers.items() if w.status == "failed"]

    @property
    def fatal_failures(self) -> list[int]:
        """Failed workers whose role the run cannot lose."""
        return [i for i in self.failed if self.workers[i].role.name in self.policy.fatal_roles]

    @property
    def failed_fraction(self) -> float:
        """The failed share of the workers the run may lose (those of non-fatal roles)."""
        losable = [
            w
            for w in self.workers.values()
            if w.role.name not in self.policy.fatal_roles and w.error_kind != VACANT
        ]
        if not losable:
            return 0.0
        return sum(w.status == "failed" for w in losable) / len(losable)

    @property
    def diverged(self) -> list[int]:
        return [i for i in self.failed if self.workers[i].error_kind == "diverged"]

    @property
    def finished(self) -> bool:
        return self.phase == "finished"

    @property
    def _rewinds(self) -> bool:
        """Does a lost epoch-role worker that comes back rewind the run?"""
        return self.rejoin and self.policy.rewinds

    @property
    def rewinding(self) -> bool:
        """A rewind is pending: an epoch-role worker was lost, the others halt for it."""
        return self._rewinding

    def mark_failed(self, worker_id: int, reason: str, kind: str = "failed") -> list[Event]:
        """Record that a worker died, stopped heartbeating or reported an error.

        The run's other workers are told (``peers``), and every barrier, checkpoint and drain it
        held is re-examined, so the run can go on without it."""
        info = self.workers[worker_id]
        if info.status in ("failed", "final"):  # a worker that handed in is done with the run
            return []
        self.joining.discard(worker_id)
        info.status = "failed"
        info.error = reason
        info.error_kind = kind
        self.control.forget(worker_id)
        events = [Event(worker_id, "failed", {"reason": reason, "host": info.host, "kind": kind})]
        if self._stopped:
            return events
        self._halted.discard(worker_id)
        if self._rewinds and self.phase == "training" and info.role.name in self.policy.epoch_roles:
            if not self._rewinding:
                self._rewind_since = time.monotonic()
            self._rewinding = True  # the others halt; training waits for it to come back
        failed = self.failed
        for i in self.alive:
            if self.workers[i].status not in ("pending", "final"):
                self._send(i, protocol.PEERS, {"failed": failed})
        events.extend(self._maybe_start())
        events.extend(self._release_barriers())
        events.extend(self._complete_checkpoints())
        events.extend(self._maybe_drain(redrain=self.phase == "draining"))
        events.extend(self._maybe_finish())
        return events

    def check_heartbeats(self, now: float) -> list[Event]:
        """Fail every registered worker silent for more than three heartbeat intervals, or
        :data:`SETUP_GRACE_S` while it sets up, and past the time its announced bulk send
        may take (:func:`bulk_until`), after :attr:`on_silent` had a chance to capture its
        stacks."""
        events: list[Event] = []
        for info in self.workers.values():
            limit = silence_limit(info.status, self.heartbeat_s)
            if info.status in ("pending", "final", "failed") or now - info.last_seen <= limit:
                continue
            if now - info.bulk_until <= limit:  # heartbeats wait behind the bytes it announced
                continue
            reason = (
                f"stopped heartbeating (nothing for {now - info.last_seen:.1f} s, "
                f"limit {limit:.1f} s)"
            )
            stacks = self.on_silent(info.id) if self.on_silent is not None else None
            if stacks:
                reason += f"; its Python stacks are in {stacks}"
            events.extend(self.mark_failed(info.id, reason))
        return events

    def resend_stale(self, now: float) -> None:
        """Send again every control message a live worker has not acknowledged in time."""
        for wid, entry in self.control.stale(now):
            if self.workers[wid].status != "failed":
                log.info("resending %s #%d to worker %d", entry.kind, entry.seq, wid)
                self._resend(wid, entry)

    def waiting_on(self) -> list[int]:
        """Workers the current phase still waits for."""
        if self._rewinding:  # the lost ones to come back, the others to halt
            roles = self.policy.epoch_roles
            back = [
                i
                for i, w in self.workers.items()
                if w.role.name in roles and (w.status == "failed" or i in self.joining)
            ]
            return back + [i for i in self._alive(roles) if i not in self._halted]
        if self.phase == "training" and self.policy.barriers and self._epoch_ends:
            epoch = min(self._epoch_ends)
            return [i for i in self._training() if i not in self._epoch_ends[epoch]]
        if self.phase == "registering":
            return [i for i in self.alive if self.workers[i].status in ("pending", "registered")]
        if self.phase == "training":
            return self._training()
        if self.phase == "draining":
            return [i for i in self.alive if self.workers[i].status != "final"]
        return []

    def stall(self, now: float) -> tuple[float, str] | None:
        """How long the run has waited, and on what, in words; None when nothing waits."""
        ids = self.waiting_on()
        if not ids:
            return None
        names = ", ".join(self.workers[i].label for i in ids)
        its = "its" if len(ids) == 1 else "their"
        if self.phase == "registering":
            pending = [i for i in ids if self.workers[i].status == "pending"]
            what = "to register" if pending else f"to load {its} data and model"
            since = self._phase_since
        elif self._rewinding:
            what = "to come back or halt (the run rewinds to its last checkpoint)"
            since = self._rewind_since
        elif self.phase == "training" and self.policy.barriers and self._epoch_ends:
            epoch = min(self._epoch_ends)
            what = f"to finish epoch {epoch}"
            since = self._barrier_since.get(epoch, self._phase_since)
        elif self.phase == "training":
            what = "to finish training"
            since = self._phase_since
        else:
            what = f"for {its} final weights"
            since = self._phase_since
        waited = now - since
        return waited, f"waiting on {names} {what} for {waited:.0f} s"

    def stop_all(self) -> None:
        """Tell every registered worker to stop, once; later calls do nothing."""
        if self._stopped:
            return
        self._stopped = True
        if self.phase != "finished":
            self.phase = "stopped"
        for info in self.workers.values():
            if info.status not in ("pending", "failed"):
                self._send(info.id, protocol.STOP, {})

    def _stop_failed(self, worker_id: int, identity: bytes, heartbeat: bool) -> None:
        """A worker the run has given up on (it hung, then resumed) speaks again: tell it to
        stop, once, so it leaves now instead of waiting for directives that never come."""
        if worker_id in self._stopped_failed:
            return
        if not heartbeat:
            self._routes[worker_id] = identity
        if worker_id not in self._routes:
            return  # a heartbeat before any main-socket message: no route to its main socket
        self._stopped_failed.add(worker_id)
        log.info("telling worker %d, which the run lost, to stop", worker_id)
        meta = {"seq": self.control.last(worker_id) + 1, "lost": True}
        self._transmit(
            worker_id, Message(protocol.STOP, protocol.COORDINATOR, self.run_id, meta=meta)
        )

    def close(self) -> None:
        self._sock.close(linger=500)

    # ------------------------------------------------------------------ sending

    def _set_phase(self, phase: Phase) -> None:
        self.phase = phase
        self._phase_since = time.monotonic()

    def _send(
        self,
        worker_id: int,
        kind: str,
        meta: dict[str, Any],
        epoch: int = 0,
        tensors: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Number a message, keep it until acknowledged, and send it."""
        entry = self.control.record(worker_id, kind, meta, epoch, tensors or {}, time.monotonic())
        self._resend(worker_id, entry)

    def _resend(self, worker_id: int, entry: Sent) -> None:
        """Send a numbered message (again, when it was not acknowledged)."""
        msg = Message(
            entry.kind, protocol.COORDINATOR, self.run_id, epoch=entry.epoch, meta=entry.meta,
            tensors=entry.tensors,
        )  # fmt: skip
        self._transmit(worker_id, msg)

    def _transmit(self, worker_id: int, msg: Message) -> None:
        route = self._routes.get(worker_id)
        if route is None:  # it never proved itself: nothing can reach it (resent later)
            log.info("no route to worker %d for %s yet", worker_id, msg.type)
            return
        nbytes = activity.tensor_bytes(msg.tensors)
        if nbytes > activity.BULK_BYTES:  # ahead of it: the worker waits for those bytes
            meta = {"incoming": nbytes}
            self._send_raw(route, worker_id, Message(protocol.STATE, protocol.COORDINATOR,
                                                     self.run_id, meta=meta))  # fmt: skip
        self._send_raw(route, worker_id, msg)

    def _send_raw(self, route: bytes, worker_id: int, msg: Message) -> None:
        try:
            channel.send(
                self._sock,
                msg,
                self.traffic,
                identity=route,
                peer=protocol.worker_name(worker_id),
                flags=zmq.NOBLOCK,
            )
        except zmq.ZMQError as exc:  # gone, reconnecting, or its queue is full: resent later
            log.info("could not send %s to worker %d now: %s", msg.type, worker_id, exc)

    # ------------------------------------------------------------------ handling

    def _handle(self, identity: bytes, msg: Message) -> list[Event]:
        wid = protocol.worker_id(msg.sender)
        if wid is None or wid not in self.workers:
            self.traffic.drop("bad_sender", msg.sender)
            return []
        heartbeat = msg.type == protocol.HEARTBEAT
        if not protocol.identity_of(identity, wid, heartbeat):
            self.traffic.drop("bad_sender", msg.sender)
            return []
        token = msg.meta.pop(protocol.AUTH, None)
        if self._tokens is not None and not (
            isinstance(token, str) and hmac.compare_digest(token.encode(), self._tokens[wid])
        ):
            self.traffic.drop("bad_auth", msg.sender)
            count = self.traffic.dropped["bad_auth"]
            if count <= channel.LOGGED_DROPS or count % 1000 == 0:
                log.warning(
                    "dropped a %s claiming to be worker %d without the run's secret (#%d)",
                    msg.type[:32], wid, count,
                )  # fmt: skip
            return []
        info = self.workers[wid]
        if info.status == "failed":
            if msg.type == protocol.REGISTER:  # a new process of a lost worker
                verdict = register_verdict(info.status, info.error_kind, self.phase, self.rejoin)
                if verdict == "rejoin":
                    self._routes[wid] = identity
                    info.last_seen = time.monotonic()
                    return self._on_rejoin(info, msg)
                self._stopped_failed.discard(wid)  # this process has not been told yet
            self.traffic.drop("failed_sender", msg.sender)
            self._stop_failed(wid, identity, heartbeat)
            return []
        if msg.type == protocol.HEARTBEAT:
            if info.status != "pending":
                info.last_seen = time.monotonic()
                self._ack(info, msg.meta.get("ack"))
                doing = activity.parse(msg.meta.get("doing"))
                if doing is not None:
                    info.activity, info.activity_at = doing, time.time()
                    until = bulk_until(info.last_seen, doing, info.bulk_arrived)
                    info.bulk_until = max(info.bulk_until, until or 0.0)
            return []
        if msg.type != protocol.REGISTER and info.status == "pending":
            self.traffic.drop("not_registered", msg.sender)
            return []
        self._routes[wid] = identity  # replies go where the worker last spoke from
        info.last_seen = time.monotonic()
        if msg.type in (protocol.CHECKPOINT, protocol.FINAL):  # the bulk it announced is here
            info.bulk_until, info.bulk_arrived = 0.0, info.last_seen
        handler = {
            protocol.REGISTER: self._on_register,
            protocol.READY: self._on_ready,
            protocol.PROGRESS: self._on_progress,
            protocol.CHECKPOINT: self._on_checkpoint,
            protocol.EPOCH_END: self._on_epoch_end,
            protocol.DONE: self._on_done,
            protocol.FINAL: self._on_final,
            protocol.ERROR: self._on_error,
            protocol.SYNC: self._on_sync,
            protocol.HALTED: self._on_halted,
        }[msg.type]
        return handler(info, msg)

    def _ack(self, info: WorkerInfo, seq: object) -> None:
        if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
            self.control.ack(info.id, seq)

    def _bad(self, info: WorkerInfo, reason: str) -> list[Event]:
        self.traffic.drop(reason, protocol.worker_name(info.id))
        return []

    def _on_register(self, info: WorkerInfo, msg: Message) -> list[Event]:
        role = msg.meta.get("role")
        if info.status != "pending" or (role is not None and role != str(info.role)):
            return self._bad(info, "bad_register")
        info.host = str(msg.meta.get("host", ""))[:255]
        pid = msg.meta.get("pid")
        info.pid = pid if isinstance(pid, int) else None
        info.status = "registered"
        meta: dict[str, Any] = {
            "recipe": self.recipe,
            "num_workers": self.num_workers,
            "role": str(info.role),
        }
        tensors: dict[str, np.ndarray] = {}
        if self.resume is not None:  # a worker with no part in the checkpoint gets no hand-in
            handin = self.resume.handins.get(info.id)
            meta["resume"] = {
                "epoch": self.resume.epoch,
                "handin": handin.meta if handin is not None else None,
            }
            tensors = handin.weights if handin is not None else {}
        self._send(info.id, protocol.WELCOME, meta, tensors=tensors)
        event = {"host": info.host, "pid": info.pid, "role": str(info.role)}
        return [Event(info.id, "registered", event)]

    def _on_ready(self, info: WorkerInfo, msg: Message) -> list[Event]:
        endpoints = msg.meta.get("endpoints", {})
        if info.status != "registered" or not _endpoints_ok(endpoints) or not _small(msg.meta):
            return self._bad(info, "bad_ready")
        info.endpoints = dict(endpoints)
        info.ready = {k: v for k, v in msg.meta.items() if k not in ("endpoints", "seq")}
        info.status = "ready"
        events = [Event(info.id, "ready", dict(msg.meta)), *self._maybe_start()]
        if info.id in self.joining and info.role.name not in self.policy.epoch_roles:
            # a worker without epochs (a parameter-server shard) re-enters at once: the
            # training workers wait for it
            events.extend(self._admit(info.id, self._current_epoch()))
        elif info.id in self.joining and self._rewinding:
            events.extend(self._maybe_rewind())
        elif info.id in self.joining and not self.policy.barriers:
            events.extend(self._admit_joiners(None))
        return events

    def _current_epoch(self) -> int:
        """The epoch the slowest training worker is in (at least 1, at most the last)."""
        running = [self.workers[j].epoch for j in self._training()]
        current = min(running, default=0) + 1
        return max(1, min(current, self.epochs) if self.epochs is not None else current)

    # ------------------------------------------------------------------ rejoin

    def _on_rejoin(self, info: WorkerInfo, msg: Message) -> list[Event]:
        """A lost worker's new process registers: welcome it again (with the last checkpoint's
        state for it, its fallback) and let it set up; it re-enters at the next boundary."""
        role = msg.meta.get("role")
        if role is not None and role != str(info.role):
            return self._bad(info, "bad_register")
        self.joining.add(info.id)
        self._stopped_failed.discard(info.id)
        self.control.restart(info.id)  # a new process numbers from 1
        info.host = str(msg.meta.get("host", ""))[:255]
        pid = msg.meta.get("pid")
        info.pid = pid if isinstance(pid, int) else None
        left = info.error
        info.status, info.error, info.error_kind = "registered", None, None
        info.endpoints, info.activity, info.activity_at = {}, None, None
        info.bulk_until = info.bulk_arrived = 0.0
        meta: dict[str, Any] = {
            "recipe": self.recipe,
            "num_workers": self.num_workers,
            "role": str(info.role),
            "rejoin": True,
        }
        tensors: dict[str, np.ndarray] = {}
        point = self.rejoin_state(info.id) if self.rejoin_state is not None else None
        self._welcomed_at[info.id] = point[0] if point is not None else None
        if point is not None:
            epoch, handin = point
            meta["resume"] = {"epoch": epoch, "handin": handin.meta}
            tensors = handin.weights
        self._send(info.id, protocol.WELCOME, meta, tensors=tensors)
        event = {"host": info.host, "pid": info.pid, "role": str(info.role), "left": left}
        return [Event(info.id, "rejoining", event)]

    def _admit_joiners(self, released: int | None) -> list[Event]:
        """Let every set-up rejoining worker re-enter: with barriers when epoch ``released``
        is released (None: none is now), else at once; turn away those with nothing left to
        join."""
        events: list[Event] = []
        for i in sorted(self.joining):
            if self.workers[i].status != "ready":
                continue
            running = [self.workers[j].epoch for j in self._training()]
            first = entry_epoch(self.policy.barriers, released, running, self.epochs)
            if first is not None:
                events.extend(self._admit(i, first))
            elif not (self.policy.barriers and released is None):
                events.extend(self._turn_away(i, "training ended before it could re-enter"))
        return events

    def _admit(self, worker_id: int, first: int) -> list[Event]:
        """Start a rejoining worker at epoch ``first``; tell the others where it is now."""
        info = self.workers[worker_id]
        self.joining.discard(worker_id)
        info.status = "running"
        info.epoch = first - 1
        joined = {str(worker_id): dict(info.endpoints)}
        failed = self.failed
        for j in self.alive:
            if j != worker_id and self.workers[j].status not in ("pending", "final"):
                self._send(j, protocol.PEERS, {"failed": failed, "joined": joined})
        meta = {
            "roster": self.roster(),
            "barriers": self.policy.barriers,
            "checkpoints": self.policy.checkpoints(info.role.name),
            "directive": self._directive_of(worker_id),
            "rejoin": {"epoch": first, **({"gen": self.gen} if self._rewinds else {})},
            "rewinds": self._rewinds,
        }
        self._send(worker_id, protocol.START, meta)
        return [Event(worker_id, "joined", {"epoch": first, "host": info.host})]

    def _directive_of(self, worker_id: int) -> dict[str, Any]:
        """The start directive a (re)joining worker gets: its own from the start, else (a new
        worker in an open slot) that of the first worker of its role that had one."""
        if worker_id in self.start_directives:
            return dict(self.start_directives[worker_id])
        role = self.workers[worker_id].role.name
        mates = [i for i in sorted(self.start_directives) if self.workers[i].role.name == role]
        return dict(self.start_directives[mates[0]]) if mates else {}

    def _turn_away(self, worker_id: int, why: str) -> list[Event]:
        """A rejoining worker came too late: it is told to stop and stays lost (kind ``late``:
        the launcher does not restart it again)."""
        info = self.workers[worker_id]
        self.joining.discard(worker_id)
        info.status, info.error, info.error_kind = "failed", f"could not rejoin: {why}", "late"
        self._send(worker_id, protocol.STOP, {})
        self.control.forget(worker_id)
        return [Event(worker_id, "rejoin_refused", {"reason": why, "host": info.host})]

    # ------------------------------------------------------------------ rewind

    def _stale(self, msg: Message) -> bool:
        """A report from before the sender's last rewind (an older generation)?"""
        return self._rewinds and gen_of(msg.meta) < self.gen

    def _on_halted(self, info: WorkerInfo, msg: Message) -> list[Event]:
        """A survivor stopped where it was for a lost worker: rewind once all have."""
        ok = self._rewinds and info.role.name in self.policy.epoch_roles
        if not ok or info.status not in ("running", "done"):
            return self._bad(info, "bad_halted")
        if gen_of(msg.meta) != self.gen:
            return self._bad(info, "stale")
        self._halted.add(info.id)
        return [Event(info.id, "halted", {"gen": self.gen}), *self._maybe_rewind()]

    def _maybe_rewind(self) -> list[Event]:
        """Once every surviving epoch-role worker halted and every lost one is back and set
        up: start the lost ones at the epoch after the last checkpoint, send every survivor
        its part of that checkpoint (none: the seeded start), and begin a new generation."""
        if not self._rewinding:
            return []
        roles = self.policy.epoch_roles
        survivors = self._alive(roles)
        lost = [i for i in self.failed if self.workers[i].role.name in roles]
        joining = {
            i: self.workers[i].status == "ready"
            for i in self.joining
            if self.workers[i].role.name in roles
        }
        if not can_rewind(survivors, self._halted, lost, joining):
            return []
        points = {i: self.rejoin_state(i) if self.rejoin_state else None for i in survivors}
        welcomed = [self._welcomed_at.get(i) for i in joining]
        resumed_after = self.resume.epoch if self.resume is not None else 0
        try:
            epoch = rewind_epoch(
                [p[0] if p is not None else None for p in points.values()] + welcomed,
                resumed_after,
            )
        except ValueError as exc:
            return self._decide(Decision(halt=f"cannot rewind: {exc}"), "rewind")
        self.gen += 1
        self._rewinding = False
        self._halted.clear()
        self._epoch_ends.clear()
        self._barrier_since.clear()
        for later in [e for e in self._partial if e > epoch]:  # trained again
            del self._partial[later]
        events: list[Event] = []
        back = sorted(joining)
        self.joining.difference_update(back)  # each starts with every other in its roster
        for i in back:
            events.extend(self._admit(i, epoch + 1))
        roster = self.roster()
        for i in survivors:
            info = self.workers[i]
            info.status, info.epoch, info.done = "running", epoch, {}
            point = points[i]
            meta = {
                "epoch": epoch,
                "gen": self.gen,
                "roster": roster,
                "handin": point[1].meta if point is not None else None,
            }
            tensors = point[1].weights if point is not None else {}
            self._send(i, protocol.REWIND, meta, epoch, tensors)
        data = {"epoch": epoch, "gen": self.gen, "workers": survivors, "back": sorted(joining)}
        events.append(Event(None, "rewound", data))
        return events

    def roster(self) -> dict[str, dict[str, Any]]:
        """Every worker still in the run: role, host, endpoints (and its placement)."""
        return {
            str(i): {
                "role": w.role.name,
                "index": w.role.index,
                "host": w.host,
                "endpoints": w.endpoints,
                **self.placement.get(i, {}),
            }
            for i, w in self.workers.items()
            if w.status != "failed" and i not in self.joining
        }

    def _decide(self, decision: Decision, stage: str) -> list[Event]:
        """Record a controller's halt (the caller's policy stops the run on it)."""
        if decision.halt is None or self.halted is not None:
            return []
        self.halted = decision.halt
        return [Event(None, "halt", {"reason": decision.halt, "at": stage})]

    def _maybe_start(self) -> list[Event]:
        """Start training once every worker that has not failed is ready."""
        alive = self.alive
        if self.phase != "registering" or not alive:
            return []
        if any(self.workers[i].status != "ready" for i in alive):
            return []
        decision = self.controller.on_start({i: self.workers[i].ready for i in alive})
        roster = self.roster()
        self._set_phase("training")
        for i in alive:
            self.workers[i].status = "running"
            # kept for a rejoining process of it (the iterations per epoch, a plan)
            self.start_directives[i] = decision.directive(i)
            meta = {
                "roster": roster,
                "barriers": self.policy.barriers,
                "checkpoints": self.policy.checkpoints(self.workers[i].role.name),
                "directive": decision.directive(i),
                "rewinds": self._rewinds,
            }
            self._send(i, protocol.START, meta)
        started = Event(None, "started", {"workers": len(alive), "barriers": self.policy.barriers})
        return [started, *self._decide(decision, "start")]

    def _on_progress(self, info: WorkerInfo, msg: Message) -> list[Event]:
        return [Event(info.id, "progress", {**msg.meta, "epoch": msg.epoch, "step": msg.step})]

    def _on_checkpoint(self, info: WorkerInfo, msg: Message) -> list[Event]:
        handin = msg.meta.get("handin")
        if not self.policy.checkpoints(info.role.name) or not isinstance(handin, dict):
            return self._bad(info, "bad_checkpoint")
        if not _small(handin):
            return self._bad(info, "bad_checkpoint")
        if self._stale(msg):
            return self._bad(info, "stale")
        # Copy: received tensors are read-only views of the receive buffers.
        if msg.epoch <= self._last_checkpoint:  # (a restarted shard's part of a written one)
            return []
        weights = {k: np.array(v) for k, v in msg.tensors.items()}
        self._partial.setdefault(msg.epoch, {})[info.id] = HandIn(weights, dict(handin))
        return self._complete_checkpoints()

    def _on_epoch_end(self, info: WorkerInfo, msg: Message) -> list[Event]:
        if info.role.name not in self.policy.epoch_roles or info.status != "running":
            return self._bad(info, "bad_epoch_end")
        if self._stale(msg):
            return self._bad(info, "stale")
        info.epoch = msg.epoch
        report = {k: v for k, v in msg.meta.items() if k != "seq"}
        events = [Event(info.id, "epoch", {**report, "epoch": msg.epoch, "step": msg.step})]
        if self.policy.barriers:
            self._epoch_ends.setdefault(msg.epoch, {})[info.id] = report
            self._barrier_since.setdefault(msg.epoch, time.monotonic())
            events.extend(self._release_barriers())
        return events

    def _training(self) -> list[int]:
        """Alive workers of epoch roles still training."""
        return [
            i for i in self._alive(self.policy.epoch_roles) if self.workers[i].status == "running"
        ]

    def _release_barriers(self) -> list[Event]:
        """Release every epoch that all alive, still-training workers have ended: ask the
        controller for directives and send each worker its ``go``."""
        if not self.policy.barriers or self._rewinding:
            return []
        events: list[Event] = []
        for epoch in sorted(self._epoch_ends):
            training = self._training()
            reports = self._epoch_ends[epoch]
            ended = [i for i in self._alive(self.policy.epoch_roles) if i in reports]
            if not set(training) <= set(reports) or not ended:
                break
            decision = self.controller.on_barrier(epoch, {i: reports[i] for i in ended})
            last = self.epochs is not None and epoch >= self.epochs
            events.extend(self._admit_joiners(epoch))  # they start with epoch + 1
            for i in training:
                if not last:
                    self._send(i, protocol.GO, {"directive": decision.directive(i)}, epoch + 1)
            del self._epoch_ends[epoch]
            self._barrier_since.pop(epoch, None)
            events.append(Event(None, "barrier", {"epoch": epoch}))
            events.extend(self._decide(decision, f"epoch {epoch}"))
        return events

    def _complete_checkpoints(self) -> list[Event]:
        """Move a checkpoint to :attr:`checkpoints` once every alive worker that checkpoints
        has sent its part. A worker of a role the run cannot lose (a parameter-server shard)
        that is away, lost or on its way back, keeps it incomplete: a checkpoint without its
        part could not restart the run (a restarted one sends its part)."""
        events: list[Event] = []
        for epoch in sorted(self._partial):
            parts = self._partial[epoch]
            alive = {i for i in self.alive if self.policy.checkpoints(self.workers[i].role.name)}
            away = [
                i
                for i, w in self.workers.items()
                if (w.status == "failed" or i in self.joining)
                and w.role.name in self.policy.fatal_roles
                and self.policy.checkpoints(w.role.name)
            ]
            if not alive or not alive <= set(parts) or away:
                continue
            self.checkpoints[epoch] = {i: parts[i] for i in sorted(alive)}
            self._last_checkpoint = max(self._last_checkpoint, epoch)
            for older in [e for e in self._partial if e < epoch]:  # never completed
                del self._partial[older]
            del self._partial[epoch]
            events.append(Event(None, "checkpoint", {"epoch": epoch, "workers": sorted(alive)}))
        return events

    def _on_done(self, info: WorkerInfo, msg: Message) -> list[Event]:
        if info.role.name not in self.policy.epoch_roles or not _small(msg.meta):
            return self._bad(info, "bad_done")
        if self._stale(msg):
            return self._bad(info, "stale")
        info.done = {k: v for k, v in msg.meta.items() if k != "seq"}
        info.status = "done"
        events = [Event(info.id, "done", dict(info.done))]
        events.extend(self._release_barriers())
        events.extend(self._maybe_drain())
        return events

    def _maybe_drain(self, redrain: bool = False) -> list[Event]:
        """Once every alive training worker is done, send every worker its drain directive;
        with ``redrain`` (a worker failed while the others drain), send the new directives to
        those still draining, so nobody waits for what the failed worker will never send."""
        trainers = self._alive(self.policy.epoch_roles)
        if self._rewinding:  # training goes back to a checkpoint first
            return []
        if redrain:
            targets = [i for i in self.alive if self.workers[i].status != "final"]
        elif self.phase == "training" and trainers:
            if any(self.workers[i].status != "done" for i in trainers):
                return []
            targets = self.alive
        else:
            return []
        if not targets:
            return []
        decision = self.controller.on_drain({i: self.workers[i].done for i in trainers})
        events: list[Event] = []
        if not redrain:
            self._set_phase("draining")
            for i in sorted(self.joining):
                events.extend(self._turn_away(i, "training ended before it could re-enter"))
        for i in targets:
            self._send(i, protocol.DRAIN, {"directive": decision.directive(i)})
        events.append(Event(None, "draining", {"again": redrain}))
        return [*events, *self._decide(decision, "drain")]

    def _on_final(self, info: WorkerInfo, msg: Message) -> list[Event]:
        handin = msg.meta.get("handin")
        if self.phase != "draining" or info.status == "final" or not isinstance(handin, dict):
            return self._bad(info, "bad_final")
        if not _small(handin):
            return self._bad(info, "bad_final")
        # Copy: received tensors are read-only views of the receive buffers.
        weights = {k: np.array(v) for k, v in msg.tensors.items()}
        self.finals[info.id] = HandIn(weights, dict(handin))
        info.status = "final"
        report = {k: v for k, v in msg.meta.items() if k != "seq"}
        return [Event(info.id, "final", report), *self._maybe_finish()]

    def _maybe_finish(self) -> list[Event]:
        alive = self.alive
        if self.phase != "draining" or not all(self.workers[i].status == "final" for i in alive):
            return []
        self._set_phase("finished")
        return [Event(None, "finished", {})]

    def _on_error(self, info: WorkerInfo, msg: Message) -> list[Event]:
        reason = str(msg.meta.get("message", "unknown error"))[:2000]
        kind = str(msg.meta.get("kind", "error"))[:32]
        events = [Event(info.id, "error", {"message": reason, "kind": kind})]
        return [*events, *self.mark_failed(info.id, reason, kind)]

    def _on_sync(self, info: WorkerInfo, msg: Message) -> list[Event]:
        """A worker waited too long: resend what it lacks, then tell it where the run is."""
        have = msg.meta.get("have")
        if not isinstance(have, int) or isinstance(have, bool) or have < 0:
            return self._bad(info, "bad_sync")
        self.control.ack(info.id, have)
        lacking = self.control.after(info.id, have, time.monotonic())
        for entry in lacking:
            self._resend(info.id, entry)
        state = {"phase": self.phase, "seq": self.control.last(info.id), "resent": len(lacking)}
        self._transmit(
            info.id, Message(protocol.STATE, protocol.COORDINATOR, self.run_id, meta=state)
        )
        return [Event(info.id, "sync", {"have": have, "resent": len(lacking)})]


def _endpoints_ok(value: object) -> bool:
    """``{name: "tcp://host:port"}`` with short strings, at most :data:`MAX_ENDPOINTS`."""
    if not isinstance(value, dict) or len(value) > MAX_ENDPOINTS:
        return False
    return all(
        isinstance(k, str) and isinstance(v, str) and 0 < len(k) <= 64 and 0 < len(v) <= 256
        for k, v in value.items()
    )


def _small(meta: Mapping[str, Any]) -> bool:
    """True if ``meta`` is a JSON object of at most :data:`MAX_META_BYTES`."""
    try:
        return len(json.dumps(meta)) <= MAX_META_BYTES
    except (TypeError, ValueError):
        return False
