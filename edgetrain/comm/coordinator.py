"""Coordinator: rendezvous, epoch barriers, drain accounting and stop, over one ROUTER socket.

The coordinator decides nothing about training; it moves workers through the phases of
:mod:`edgetrain.comm.protocol` and hands every event to the caller as plain data.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from edgetrain.comm import channel, protocol
from edgetrain.comm.channel import Traffic
from edgetrain.comm.wire import Message

log = logging.getLogger(__name__)


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


@dataclass
class Event:
    """Something that happened (``at``: time.monotonic() when it did), for the caller."""

    worker: int
    kind: str
    data: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


@dataclass
class FinalState:
    """A worker's last weights and mixing weight, sent after draining its inbox."""

    alpha: float
    weights: dict[str, np.ndarray]
    meta: dict[str, Any]


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
    ) -> None:
        self.run_id = run_id
        self.recipe = recipe
        self.num_workers = num_workers
        self.sync_epochs = sync_epochs
        self.traffic = Traffic()
        self.workers = {i: WorkerInfo(i) for i in range(num_workers)}
        self.finals: dict[int, FinalState] = {}
        self.phase = "registering"  # registering, training, draining, finished, stopped
        self._epoch_ends: dict[int, set[int]] = {}
        self._stopped = False
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 1000)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.endpoint = channel.bind_random(self._sock, bind_host, announce_host)

    # ------------------------------------------------------------------ public

    def poll(self, timeout_ms: int) -> list[Event]:
        """Wait up to ``timeout_ms`` for a message, then handle all that are waiting."""
        events: list[Event] = []
        if not self._sock.poll(timeout_ms, zmq.POLLIN):
            return events
        while True:
            got = channel.recv(
                self._sock, self.run_id, protocol.TO_COORDINATOR, self.traffic, router=True
            )
            if got is not None:
                identity, msg = got
                events.extend(self._handle(identity or b"", msg))
            if not self._sock.poll(0, zmq.POLLIN):
                return events

    @property
    def alive(self) -> list[int]:
        return [i for i, w in self.workers.items() if w.status != "failed"]

    @property
    def finished(self) -> bool:
        return self.phase == "finished"

    def mark_failed(self, worker_id: int, reason: str) -> None:
        """Record that a worker died or misbehaved (called by the launcher or on ERROR)."""
        info = self.workers[worker_id]
        if info.status != "failed":
            info.status = "failed"
            info.error = reason

    def waiting_on(self) -> list[int]:
        """Workers the current phase still waits for."""
        want = {
            "registering": ("pending", "registered"),
            "training": ("running",),
            "draining": ("done",),
        }.get(self.phase, ())
        return [i for i, w in self.workers.items() if w.status in want]

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

    def _send(self, worker_id: int, kind: str, meta: dict[str, Any], epoch: int = 0) -> None:
        msg = Message(kind, protocol.COORDINATOR, self.run_id, epoch=epoch, meta=meta)
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
        if wid is None or wid not in self.workers or identity != msg.sender.encode():
            self.traffic.dropped["bad_sender"] += 1
            return []
        info = self.workers[wid]
        if info.status == "failed":
            self.traffic.dropped["failed_sender"] += 1
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
        self._send(
            info.id, protocol.WELCOME, {"recipe": self.recipe, "num_workers": self.num_workers}
        )
        return [Event(info.id, "registered", {"host": info.host, "pid": info.pid})]

    def _on_ready(self, info: WorkerInfo, msg: Message) -> list[Event]:
        info.status = "ready"
        events = [Event(info.id, "ready", dict(msg.meta))]
        if all(w.status == "ready" for w in self.workers.values()):
            peers = {str(i): w.endpoint for i, w in self.workers.items()}
            self.phase = "training"
            for w in self.workers.values():
                w.status = "running"
                self._send(w.id, protocol.START, {"peers": peers})
            events.append(Event(-1, "started", {"workers": self.num_workers}))
        return events

    def _on_progress(self, info: WorkerInfo, msg: Message) -> list[Event]:
        return [Event(info.id, "progress", {**msg.meta, "epoch": msg.epoch, "step": msg.step})]

    def _on_epoch_end(self, info: WorkerInfo, msg: Message) -> list[Event]:
        info.epoch = msg.epoch
        events = [Event(info.id, "epoch", {**msg.meta, "epoch": msg.epoch, "step": msg.step})]
        self._epoch_ends.setdefault(msg.epoch, set()).add(info.id)
        events.extend(self._release_barriers())
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
        if self.phase != "training" or any(self.workers[i].status != "done" for i in self.alive):
            return []
        self.phase = "draining"
        for i in self.alive:
            expect = sum(self.workers[j].sent.get(i, 0) for j in self.alive)
            self._send(i, protocol.DRAIN, {"expect": expect})
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
        events = [Event(info.id, "final", dict(msg.meta))]
        if all(self.workers[i].status == "final" for i in self.alive):
            self.phase = "finished"
            events.append(Event(-1, "finished", {}))
        return events

    def _on_error(self, info: WorkerInfo, msg: Message) -> list[Event]:
        reason = str(msg.meta.get("message", "unknown error"))[:2000]
        self.mark_failed(info.id, reason)
        return [Event(info.id, "error", {"message": reason})]


def _worker_id(sender: str) -> int | None:
    if sender.startswith("w") and sender[1:].isdigit():
        return int(sender[1:])
    return None
