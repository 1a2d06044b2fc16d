"""A trainer's transmitter: one thread that runs its transmissions to the shards one at a time,
in order.

The cost model assumes a trainer's transmissions never overlap, so every pull and push of an
iteration is a job in one FIFO, run by one thread that owns every socket to the shards (ZeroMQ
sockets are not shared between threads). A pull job asks each shard that holds part of its
segment, copies the replies into the model's parameters and sets the segment's ``ready``
event; a push job first waits for its segment's gradients (``grad_ready``), sends them and
waits for the acknowledgements. Every transmission is logged: direction, segment, bytes, start
and end, and the time a shard held it waiting for a version (synchronisation, not the link).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import zmq

from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Message
from edgetrain.errors import RunError
from edgetrain.ps import messages
from edgetrain.ps.layout import Layout


@dataclass(frozen=True)
class Transmission:
    """One pull or push of one segment, as it happened (``time.perf_counter`` seconds)."""

    direction: str  # pull | push
    iteration: int
    segment: int  # 1-based, in the phase's order
    nbytes: int
    start: float
    end: float
    held_s: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Job:
    direction: str
    iteration: int
    segment: int
    names: tuple[str, ...]
    done: threading.Event  # pull: the segment's parameters are in; push: its gradients went


class Transmitter(threading.Thread):
    """The comm thread of one trainer."""

    def __init__(
        self,
        transport: Transport,
        endpoints: Mapping[int, str],
        layout: Layout,
        params: Mapping[str, torch.Tensor],
        reply_timeout_s: float,
    ) -> None:
        super().__init__(daemon=True, name="ps-link")
        self.transport = transport
        self.endpoints = dict(endpoints)
        self.layout = layout
        self.params = params
        self.reply_timeout_s = reply_timeout_s
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.log: list[Transmission] = []
        self.error: str | None = None
        self._grad_ready: dict[tuple[int, int], threading.Event] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ main thread side

    def pull(self, iteration: int, segment: int, names: Sequence[str]) -> threading.Event:
        done = threading.Event()
        self.jobs.put(Job("pull", iteration, segment, tuple(names), done))
        return done

    def push(
        self, iteration: int, segment: int, names: Sequence[str], ready: threading.Event
    ) -> threading.Event:
        """Queue a push that starts once ``ready`` is set (the segment's gradients exist)."""
        with self._lock:
            self._grad_ready[(iteration, segment)] = ready
        done = threading.Event()
        self.jobs.put(Job("push", iteration, segment, tuple(names), done))
        return done

    def stop(self) -> None:
        self.jobs.put(None)
        self.join(timeout=10)

    def wait(self, event: threading.Event, what: str) -> None:
        """Wait for a job's event, or raise naming what failed (a dead shard, a timeout)."""
        deadline = time.monotonic() + self.reply_timeout_s + 5
        while not event.wait(0.5):
            if self.error is not None:
                raise RunError(self.error)
            if time.monotonic() > deadline or not self.is_alive():
                raise RunError(f"{what}: the parameter servers did not answer in time")
        if self.error is not None:
            raise RunError(self.error)

    # ------------------------------------------------------------------ the thread

    def run(self) -> None:
        socks = {}
        try:
            for k, endpoint in self.endpoints.items():
                socks[k] = self.transport.connect(
                    zmq.DEALER, endpoint, identity=self.transport.name
                )
            while (job := self.jobs.get()) is not None:
                if self.error is None:
                    self._run(job, socks)
                job.done.set()  # (on error too: the main thread sees self.error)
        except Exception as exc:  # noqa: BLE001 - the main thread reports it
            self.error = f"parameter-server link failed: {type(exc).__name__}: {exc}"
        finally:
            for sock in socks.values():
                sock.close(linger=0)

    def _run(self, job: Job, socks: Mapping[int, zmq.SyncSocket]) -> None:
        if job.direction == "push":
            with self._lock:
                ready = self._grad_ready.pop((job.iteration, job.segment))
            while not ready.wait(0.5):
                if self.error is not None:
                    return
        groups = self.layout.by_server(list(job.names))
        start = time.perf_counter()
        nbytes = 0
        for k, names in groups.items():
            meta = {
                "iter": job.iteration,
                "seg": job.segment,
                "names": names,
                "layout": self.layout.digest,
            }
            tensors: dict[str, np.ndarray] = {}
            if job.direction == "push":
                tensors = {n: _grad(self.params[n]) for n in names}
            kind = messages.PULL if job.direction == "pull" else messages.PUSH
            msg = self.transport.message(kind, meta, tensors)
            nbytes += self.transport.send(socks[k], msg, peer=f"ps{k}")
        held = 0.0
        want = messages.PARAMS if job.direction == "pull" else messages.ACK
        for k, names in groups.items():
            reply = self._reply(socks[k], k, want, job)
            if reply is None:
                return
            held = max(held, float(reply.meta.get("held_s", 0.0) or 0.0))
            if job.direction == "pull":
                self._copy_in(reply, names, k)
                nbytes += sum(int(a.nbytes) for a in reply.tensors.values())
        end = time.perf_counter()
        self.log.append(
            Transmission(job.direction, job.iteration, job.segment, nbytes, start, end, held)
        )

    def _reply(self, sock: zmq.SyncSocket, k: int, want: str, job: Job) -> Message | None:
        deadline = time.monotonic() + self.reply_timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(min(left, 1.0) * 1000), zmq.POLLIN):
                if left <= 0:
                    self.error = (
                        f"parameter server {k} did not answer {job.direction} {job.segment} of "
                        f"iteration {job.iteration} within {self.reply_timeout_s:.0f} s"
                    )
                    return None
                continue
            got = self.transport.recv(sock, messages.TO_TRAINER)
            if got is None:
                continue
            msg = got[1]
            if (
                msg.type != want
                or msg.meta.get("iter") != job.iteration
                or msg.meta.get("seg") != job.segment
            ):
                self.transport.traffic.drop("unexpected_reply", msg.sender)
                continue
            return msg

    def _copy_in(self, reply: Message, names: list[str], k: int) -> None:
        if set(reply.tensors) != set(names):
            self.error = f"parameter server {k} answered a pull with other tensors"
            return
        with torch.no_grad():
            for n in names:
                arr = reply.tensors[n]
                p = self.params[n]
                if tuple(arr.shape) != tuple(p.shape) or arr.dtype != np.float32:
                    self.error = f"parameter server {k} sent {n} with a wrong shape or dtype"
                    return
                if p.device.type == "cpu":
                    np.copyto(p.detach().numpy(), arr)  # (received arrays are read-only views)
                else:  # a GPU trainer: one host-to-device copy
                    p.copy_(torch.from_numpy(np.array(arr)))


def _grad(p: torch.Tensor) -> np.ndarray:
    """A parameter's gradient as an array (zeros if it got none this iteration)."""
    if p.grad is None:
        return np.zeros(tuple(p.shape), dtype=np.float32)
    return p.grad.detach().cpu().numpy()  # (no copy on the CPU)
