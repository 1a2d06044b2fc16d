"""Coordinator: rendezvous, heartbeats, epoch barriers, checkpoints, drain accounting and stop.

Everything goes over one ROUTER socket. The coordinator decides nothing about training; it moves
workers through the phases of :mod:`edgetrain.comm.protocol`, notices workers that stop
heartbeating, and hands every event to the caller as plain data. Whether a run can go on
without its failed workers is the caller's policy (:attr:`failed_fraction`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from edgetrain.comm import channel, protocol, sockets
from edgetrain.comm.channel import Traffic
from edgetrain.comm.security import CurveKeys
from edgetrain.comm.wire import Message

log = logging.getLogger(__name__)

# A worker is failed after this many heartbeat intervals without a word from it.
MISSED_HEARTBEATS = 3


@dataclass
class WorkerInfo:
    """What the coordinator knows of one worker."""

    id: int
    host: str = ""
    pid: int | None = None
    endpoint: str = ""
    status: str = "pending"  # pending, registered, ready, running, done, final, failed
    epoch: int = 0
    sent: dict[int, int] = field(default_factory=dict)
    last_seen: float = 0.0
    error: str | None = None

    @property
    def label(self) -> str:
        return f"worker {self.id} (host {self.host})" if self.host else f"worker {self.id}"


@dataclass
class Event:
    """Something that happened (``at``: time.monotonic() when it did), for the caller."""

    worker: int
    kind: str
    data: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


@dataclass
class FinalState:
    """A worker's weights (and optimiser state) and mixing weight: its final or checkpointed
    state."""

    alpha: float
    weights: dict[str, np.ndarray]
    meta: dict[str, Any]


@dataclass(frozen=True)
class Resume:
    """Where a resumed run starts: the last checkpointed epoch and each worker's state."""

    epoch: int
    states: dict[int, FinalState]


class Coordinator:
    """Drives the workers of one run through registration, training, draining and stop."""

    def __init__(
        self,
        run_id: str,
        recipe: dict[str, Any],
        num_workers: int,
        sync_epochs: bool = True,
        bind_host: str = "127.0.0.1",
        announce_host: str | None = None,
        context: zmq.Context | None = None,
        heartbeat_s: float = 1.0,
        resume: Resume | None = None,
        security: CurveKeys | None = None,
    ) -> None:
        self.run_id = run_id
        self.recipe = recipe
        self.num_workers = num_workers
        self.sync_epochs = sync_epochs
        self.heartbeat_s = heartbeat_s
        self.resume = resume
        self.traffic = Traffic()
        self.workers = {i: WorkerInfo(i) for i in range(num_workers)}
        self.finals: dict[int, FinalState] = {}
        # Complete checkpoints (every alive worker's state), for the caller to write and pop.
        self.checkpoints: dict[int, dict[int, FinalState]] = {}
        self.phase = "registering"  # registering, training, draining, finished, stopped
        self._epoch_ends: dict[int, set[int]] = {}
        self._barrier_since: dict[int, float] = {}
        self._partial: dict[int, dict[int, FinalState]] = {}
        self._phase_since = time.monotonic()
        self._stopped = False
        self._ctx = context or zmq.Context.instance()
        self._sock = sockets.server(self._ctx, zmq.ROUTER, security)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.endpoint = channel.bind_random(self._sock, bind_host, announce_host)

    # ------------------------------------------------------------------ public

    def poll(self, timeout_ms: int) -> list[Event]:
        """Wait up to ``timeout_ms`` for messages, handle all that wait, then check heartbeats."""
        events: list[Event] = []
        if self._sock.poll(timeout_ms, zmq.POLLIN):
            while True:
                got = channel.recv(
                    self._sock, self.run_id, protocol.TO_COORDINATOR, self.traffic, router=True
                )
                if got is not None:
                    identity, msg = got
                    events.extend(self._handle(identity or b"", msg))
                if not self._sock.poll(0, zmq.POLLIN):
                    break
        events.extend(self.check_heartbeats(time.monotonic()))
        return events

    @property
    def alive(self) -> list[int]:
        return [i for i, w in self.workers.items() if w.status != "failed"]

    @property
    def failed(self) -> list[int]:
        return [i for i, w in self.workers.items() if w.status == "failed"]

    @property
    def failed_fraction(self) -> float:
        return len(self.failed) / self.num_workers

    @property
    def finished(self) -> bool:
        return self.phase == "finished"

    def mark_failed(self, worker_id: int, reason: str) -> list[Event]:
        """Record that a worker died, stopped heartbeating or reported an error.

        The run's other workers are told to stop gossiping with it, and every barrier it held
        is re-examined, so the run can go on without it."""
        info = self.workers[worker_id]
        if info.status == "failed":
            return []
        info.status = "failed"
        info.error = reason
        events = [Event(worker_id, "failed", {"reason": reason, "host": info.host})]
        if self._stopped:
            return events
        failed = self.failed
        for i in self.alive:
            if self.workers[i].status not in ("pending", "final"):
                self._send(i, protocol.PEERS, {"failed": failed})
        events.extend(self._maybe_start())
        events.extend(self._release_barriers())
        events.extend(self._complete_checkpoints())
        events.extend(self._maybe_drain())
        events.extend(self._maybe_finish())
        return events

    def check_heartbeats(self, now: float) -> list[Event]:
        """Fail every registered worker silent for more than three heartbeat intervals."""
        limit = MISSED_HEARTBEATS * self.heartbeat_s
        events: list[Event] = []
        for info in self.workers.values():
            if info.status in ("pending", "final", "failed") or now - info.last_seen <= limit:
                continue
            events.extend(
                self.mark_failed(
                    info.id,
                    f"stopped heartbeating (nothing for {now - info.last_seen:.1f} s, "
                    f"limit {limit:.1f} s)",
                )
            )
        return events

    def waiting_on(self) -> list[int]:
        """Workers the current phase still waits for."""
        if self.phase == "training" and self.sync_epochs and self._epoch_ends:
            epoch = min(self._epoch_ends)
            return [
                i
                for i in self.alive
                if self.workers[i].status == "running" and i not in self._epoch_ends[epoch]
            ]
        want = {
            "registering": ("pending", "registered"),
            "training": ("running",),
            "draining": ("done",),
        }.get(self.phase, ())
        return [i for i, w in self.workers.items() if w.status in want]

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
        elif self.phase == "training" and self.sync_epochs and self._epoch_ends:
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
            if info.endpoint:
                self._send(info.id, protocol.STOP, {})

    def close(self) -> None:
        self._sock.close(linger=500)

    # ------------------------------------------------------------------ handling

    def _set_phase(self, phase: str) -> None:
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
        msg = Message(
            kind, protocol.COORDINATOR, self.run_id, epoch=epoch, meta=meta, tensors=tensors or {}
        )
        try:
            channel.send(
                self._sock,
                msg,
                self.traffic,
                identity=protocol.worker_name(worker_id).encode(),
                flags=zmq.NOBLOCK,
            )
        except zmq.ZMQError as exc:  # the worker is gone or its queue is full
            log.info("could not send %s to worker %d: %s", kind, worker_id, exc)

    def _handle(self, identity: bytes, msg: Message) -> list[Event]:
        wid = _worker_id(msg.sender)
        if wid is None or wid not in self.workers:
            self.traffic.dropped["bad_sender"] += 1
            return []
        expected = (
            protocol.heartbeat_identity(wid) if msg.type == protocol.HEARTBEAT else msg.sender
        )
        if identity != expected.encode():
            self.traffic.dropped["bad_sender"] += 1
            return []
        info = self.workers[wid]
        if info.status == "failed":
            self.traffic.dropped["failed_sender"] += 1
            return []
        if msg.type == protocol.HEARTBEAT:
            if info.status != "pending":
                info.last_seen = time.monotonic()
            return []
        info.last_seen = time.monotonic()
        handler = {
            protocol.REGISTER: self._on_register,
            protocol.READY: self._on_ready,
            protocol.PROGRESS: self._on_progress,
            protocol.EPOCH_END: self._on_epoch_end,
            protocol.DONE: self._on_done,
            protocol.FINAL: self._on_final,
            protocol.ERROR: self._on_error,
        }[msg.type]
        return handler(info, msg)

    def _on_register(self, info: WorkerInfo, msg: Message) -> list[Event]:
        endpoint = msg.meta.get("endpoint")
        if info.status != "pending" or not isinstance(endpoint, str):
            self.traffic.dropped["bad_register"] += 1
            return []
        info.endpoint = endpoint
        info.host = str(msg.meta.get("host", ""))[:255]
        pid = msg.meta.get("pid")
        info.pid = pid if isinstance(pid, int) else None
        info.status = "registered"
        meta: dict[str, Any] = {"recipe": self.recipe, "num_workers": self.num_workers}
        tensors: dict[str, np.ndarray] = {}
        if self.resume is not None:
            state = self.resume.states[info.id]
            meta["resume"] = {"epoch": self.resume.epoch, "alpha": state.alpha}
            tensors = state.weights
        self._send(info.id, protocol.WELCOME, meta, tensors=tensors)
        return [Event(info.id, "registered", {"host": info.host, "pid": info.pid})]

    def _on_ready(self, info: WorkerInfo, msg: Message) -> list[Event]:
        info.status = "ready"
        return [Event(info.id, "ready", dict(msg.meta)), *self._maybe_start()]

    def _maybe_start(self) -> list[Event]:
        """Start training once every worker that has not failed is ready."""
        alive = self.alive
        if self.phase != "registering" or not alive:
            return []
        if any(self.workers[i].status != "ready" for i in alive):
            return []
        peers = {str(i): self.workers[i].endpoint for i in alive}
        self._set_phase("training")
        for i in alive:
            self.workers[i].status = "running"
            self._send(i, protocol.START, {"peers": peers})
        return [Event(-1, "started", {"workers": len(alive)})]

    def _on_progress(self, info: WorkerInfo, msg: Message) -> list[Event]:
        return [Event(info.id, "progress", {**msg.meta, "epoch": msg.epoch, "step": msg.step})]

    def _on_epoch_end(self, info: WorkerInfo, msg: Message) -> list[Event]:
        info.epoch = msg.epoch
        meta = {k: v for k, v in msg.meta.items() if k != "checkpoint"}
        events = [Event(info.id, "epoch", {**meta, "epoch": msg.epoch, "step": msg.step})]
        ckpt = msg.meta.get("checkpoint")
        if msg.tensors and isinstance(ckpt, dict):
            alpha = ckpt.get("alpha")
            if isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha >= 0:
                weights = {k: np.array(v) for k, v in msg.tensors.items()}
                state = FinalState(float(alpha), weights, {"epoch": msg.epoch})
                self._partial.setdefault(msg.epoch, {})[info.id] = state
            else:
                self.traffic.dropped["bad_checkpoint"] += 1
        self._epoch_ends.setdefault(msg.epoch, set()).add(info.id)
        self._barrier_since.setdefault(msg.epoch, time.monotonic())
        events.extend(self._complete_checkpoints())
        events.extend(self._release_barriers())
        return events

    def _complete_checkpoints(self) -> list[Event]:
        """Move a checkpoint to :attr:`checkpoints` once every alive worker has sent its part."""
        events: list[Event] = []
        for epoch in sorted(self._partial):
            parts = self._partial[epoch]
            alive = set(self.alive)
            if not alive or not alive <= set(parts):
                continue
            self.checkpoints[epoch] = {i: parts[i] for i in sorted(alive)}
            del self._partial[epoch]
            events.append(Event(-1, "checkpoint", {"epoch": epoch, "workers": sorted(alive)}))
        return events

    def _release_barriers(self) -> list[Event]:
        """Send ``go`` for every epoch that all alive, still-training workers have ended."""
        if not self.sync_epochs:
            return []
        events: list[Event] = []
        training = [i for i in self.alive if self.workers[i].status == "running"]
        for epoch in sorted(self._epoch_ends):
            if not set(training) <= self._epoch_ends[epoch]:
                break
            for i in training:
                self._send(i, protocol.GO, {}, epoch=epoch + 1)
            del self._epoch_ends[epoch]
            self._barrier_since.pop(epoch, None)
            events.append(Event(-1, "barrier", {"epoch": epoch}))
        return events

    def _on_done(self, info: WorkerInfo, msg: Message) -> list[Event]:
        sent = msg.meta.get("sent", {})
        if not isinstance(sent, dict):
            self.traffic.dropped["bad_done"] += 1
            return []
        info.sent = {
            int(k): int(v)
            for k, v in sent.items()
            if str(k).isdigit() and isinstance(v, int) and v >= 0
        }
        info.status = "done"
        events = [Event(info.id, "done", dict(msg.meta))]
        events.extend(self._release_barriers())
        events.extend(self._maybe_drain())
        return events

    def _maybe_drain(self) -> list[Event]:
        """Once every alive worker is done, tell each how many messages each alive peer sent it.

        Messages from failed workers are not counted: they may or may not have arrived."""
        alive = self.alive
        if self.phase != "training" or any(self.workers[i].status != "done" for i in alive):
            return []
        self._set_phase("draining")
        for i in alive:
            expect_from = {str(j): self.workers[j].sent.get(i, 0) for j in alive if j != i}
            self._send(
                i,
                protocol.DRAIN,
                {"expect": sum(expect_from.values()), "expect_from": expect_from},
            )
        return [Event(-1, "draining", {})]

    def _on_final(self, info: WorkerInfo, msg: Message) -> list[Event]:
        alpha = msg.meta.get("alpha")
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or alpha < 0:
            self.traffic.dropped["bad_final"] += 1
            return []
        # Copy: received tensors are read-only views of the receive buffers.
        weights = {k: np.array(v) for k, v in msg.tensors.items()}
        self.finals[info.id] = FinalState(float(alpha), weights, dict(msg.meta))
        info.status = "final"
        return [Event(info.id, "final", dict(msg.meta)), *self._maybe_finish()]

    def _maybe_finish(self) -> list[Event]:
        alive = self.alive
        if self.phase != "draining" or not all(self.workers[i].status == "final" for i in alive):
            return []
        self._set_phase("finished")
        return [Event(-1, "finished", {})]

    def _on_error(self, info: WorkerInfo, msg: Message) -> list[Event]:
        reason = str(msg.meta.get("message", "unknown error"))[:2000]
        return [Event(info.id, "error", {"message": reason}), *self.mark_failed(info.id, reason)]


def _worker_id(sender: str) -> int | None:
    if sender.startswith("w") and sender[1:].isdigit():
        return int(sender[1:])
    return None
