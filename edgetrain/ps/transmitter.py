"""A trainer's transmitter: one thread that owns every socket to the shards (ZeroMQ sockets
are not shared between threads) and keeps the trainer's transmissions in flight, pipelined as a
real client would.

Every pull and push of an iteration is a job in one FIFO, in the planned order. The thread
sends each job's requests as soon as it may, without waiting for the answers to the ones
before: a pull at once, a push once its segment's gradients exist (``grad_ready``). So N
transmissions sent together pay one round trip of latency plus their transfers, not N round
trips. Every request carries an id (``req``) that its replies echo. Answers are applied in the
order the requests went out, whatever order they arrive in: a pull's replies are copied into
the model's parameters and its ``ready`` event set, a push's done event is set on its
acknowledgements.

Every transmission is logged: direction, segment, bytes, when its requests went out, the
stretch of time the link spent on it, and the time a shard held it waiting for a version
(synchronisation, not the link), and when its last answer came in (``arrived``: answers are
applied in request order, so a reply that came early waits for the ones before it). A
transmission sent while another of its direction was still in flight starts, in the log, where
that one ended: it came right behind it and shared its round trip (``lead`` False). One sent
with nothing of its direction in flight paid a round trip of its own (``lead`` True). The link
fit reads the link's time on each from the arrivals (:mod:`.arrivals`) and tells the round trip
apart from the per-transmission overhead (:mod:`.latency`).

A shard that is lost and restarted (``[run] restart``) is rebuilt from the trainers' copies
(:mod:`.recovery`): while it is away its replies are not overdue; when it is back, the thread
connects to its new endpoint, sends it this trainer's copy of its tensors (``ps.state``), then
again every request it had not answered and the acknowledged pushes it may need again.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import zmq

from edgetrain.comm import activity
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Message, is_count
from edgetrain.errors import RunError
from edgetrain.ps import messages
from edgetrain.ps.arrivals import Transmission
from edgetrain.ps.layout import Layout
from edgetrain.ps.recovery import KeptPushes

# How often a push whose gradients are announced by a plain ``threading.Event`` (not a
# :class:`Signal`, which wakes the thread) is looked at.
PLAIN_EVENT_POLL_S = 0.005


@dataclass(frozen=True)
class Job:
    direction: str
    iteration: int
    segment: int
    names: tuple[str, ...]
    done: threading.Event  # pull: the segment's parameters are in; push: its gradients went


class Signal(threading.Event):
    """An event whose ``set`` also wakes the transmitter's thread (a segment's gradients
    exist: its push may go)."""

    def __init__(self, wake: Callable[[], None]) -> None:
        super().__init__()
        self._wake = wake

    def set(self) -> None:
        super().set()
        self._wake()


@dataclass
class _Flight:
    """A transmission whose requests went out; ``replies`` by shard as they come in."""

    job: Job
    groups: dict[int, list[str]]  # shard -> the names asked of it
    sent: float
    lead: bool
    deadline: float  # time.monotonic() by which every shard must have answered
    nbytes: int
    arrived: float = 0.0  # perf_counter when its last answer came in
    replies: dict[int, Message] = field(default_factory=dict)
    tensors: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # a push's, by shard

    @property
    def answered(self) -> bool:
        return len(self.replies) == len(self.groups)


class Transmitter(threading.Thread):
    """The comm thread of one trainer."""

    def __init__(
        self,
        transport: Transport,
        endpoints: Mapping[int, str],
        layout: Layout,
        params: Mapping[str, torch.Tensor],
        reply_timeout_s: float,
        keep_pushes: bool = False,
    ) -> None:
        """With ``keep_pushes`` (``[run] restart``: a lost shard is rebuilt from the trainers),
        acknowledged pushes are kept until a pull shows them applied (:mod:`.recovery`)."""
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
        # the thread's own state
        self._backlog: deque[Job] = deque()  # queued, not sent yet (a push awaits gradients)
        self._flights: dict[int, _Flight] = {}  # by request id, in the order they went out
        self._last_end = {"pull": float("-inf"), "push": float("-inf")}
        self._req = itertools.count(1)
        # a pipe that wakes the thread's poll when a job is queued or gradients exist
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._closed = False
        # what a rebuilt shard takes from this trainer (:mod:`.recovery`)
        self.versions: dict[str, int] = {}  # the version of each tensor's last pull
        self.pushed: dict[str, int] = {}  # the last iteration of each tensor's acknowledged push
        self.kept = KeptPushes() if keep_pushes else None
        self.lost: set[int] = set()  # shards lost and not back: their replies are not overdue
        self._back: queue.Queue[tuple[int, str]] = queue.Queue()  # (shard, its new endpoint)
        self.recoveries: list[dict[str, object]] = []  # each shard rebuilt: what went to it
        # called while the main thread waits (the trainer's session: a lost or rebuilt shard
        # is heard of meanwhile)
        self.on_wait: Callable[[], None] | None = None

    # ------------------------------------------------------------------ main thread side

    def signal(self) -> Signal:
        """An event for :meth:`push`'s ``ready`` that wakes this thread when it is set."""
        return Signal(self._wake)

    def pull(self, iteration: int, segment: int, names: Sequence[str]) -> threading.Event:
        done = threading.Event()
        self.jobs.put(Job("pull", iteration, segment, tuple(names), done))
        self._wake()
        return done

    def push(
        self, iteration: int, segment: int, names: Sequence[str], ready: threading.Event
    ) -> threading.Event:
        """Queue a push that goes out once ``ready`` is set (the segment's gradients exist;
        an event from :meth:`signal` wakes the thread at once, a plain one is looked at every
        few milliseconds)."""
        with self._lock:
            self._grad_ready[(iteration, segment)] = ready
        done = threading.Event()
        self.jobs.put(Job("push", iteration, segment, tuple(names), done))
        self._wake()
        return done

    def stop(self) -> None:
        """End the thread (transmissions still in flight are abandoned) and free its pipe."""
        self.jobs.put(None)
        self._wake()
        self.join(timeout=10)
        if not self.is_alive() and not self._closed:
            self._closed = True
            os.close(self._wake_r)
            os.close(self._wake_w)

    def shard_lost(self, shard: int) -> None:
        """Shard ``shard`` was lost and will be restarted: its replies are not overdue."""
        with self._lock:
            self.lost.add(shard)

    def shard_back(self, shard: int, endpoint: str) -> None:
        """Shard ``shard`` is back at ``endpoint``: the thread reconnects and rebuilds it."""
        self._back.put((shard, endpoint))
        self._wake()

    def wait(self, event: threading.Event, what: str) -> None:
        """Wait for a job's event, or raise naming what failed (a dead shard, a timeout);
        while it waits, the heartbeats say so (``edgetrain status``)."""
        deadline = time.monotonic() + self.reply_timeout_s + 5
        if not event.is_set():
            with activity.waiting("the parameter servers", what):
                while not event.wait(0.5):
                    if self.on_wait is not None:
                        self.on_wait()
                    if self.error is not None:
                        raise RunError(self.error)
                    if self.lost or not self._back.empty():  # a shard on its way back
                        deadline = time.monotonic() + self.reply_timeout_s + 5
                    if time.monotonic() > deadline or not self.is_alive():
                        raise RunError(f"{what}: the parameter servers did not answer in time")
        if self.error is not None:
            raise RunError(self.error)

    def _wake(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(BlockingIOError):  # (a full pipe wakes the thread already)
            os.write(self._wake_w, b"\0")

    # ------------------------------------------------------------------ the thread

    def run(self) -> None:
        socks: dict[int, zmq.SyncSocket] = {}
        try:
            for k, endpoint in self.endpoints.items():
                socks[k] = self.transport.connect(
                    zmq.DEALER, endpoint, identity=self.transport.name
                )
            poller = zmq.Poller()
            for sock in socks.values():
                poller.register(sock, zmq.POLLIN)
            poller.register(self._wake_r, zmq.POLLIN)
            while self._take_jobs():
                self._reconnect(socks, poller)
                self._send_ready(socks)
                ready = dict(poller.poll(self._poll_ms()))
                if self._wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                for k, sock in socks.items():
                    if sock in ready:
                        self._receive(sock, k)
                self._retire()
                self._check_deadlines()
                if self.error is not None:
                    self._release_all()
        except Exception as exc:  # noqa: BLE001 - the main thread reports it
            self.error = f"parameter-server link failed: {type(exc).__name__}: {exc}"
        finally:
            self._release_all()  # (the main thread sees self.error, if any)
            for sock in socks.values():
                sock.close(linger=0)

    def _take_jobs(self) -> bool:
        """Move queued jobs to the backlog; False once :meth:`stop` was called."""
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                return True
            if job is None:
                return False
            if self.error is not None:
                job.done.set()  # (the main thread sees self.error)
            else:
                self._backlog.append(job)

    def _send_ready(self, socks: Mapping[int, zmq.SyncSocket]) -> None:
        """Send the backlog's jobs in order, up to a push whose gradients do not exist yet."""
        while self._backlog and self.error is None:
            job = self._backlog[0]
            if job.direction == "push":
                with self._lock:
                    ready = self._grad_ready[(job.iteration, job.segment)]
                if not ready.is_set():
                    return
                with self._lock:
                    del self._grad_ready[(job.iteration, job.segment)]
            self._backlog.popleft()
            self._send(job, socks)

    def _send(self, job: Job, socks: Mapping[int, zmq.SyncSocket]) -> None:
        req = next(self._req)
        lead = all(f.job.direction != job.direction for f in self._flights.values())
        groups = self.layout.by_server(list(job.names))
        sent = time.perf_counter()
        nbytes = 0
        pushed: dict[int, dict[str, np.ndarray]] = {}
        kind = messages.PULL if job.direction == "pull" else messages.PUSH
        for k, names in groups.items():
            tensors: dict[str, np.ndarray] = {}
            if job.direction == "push":
                tensors = pushed[k] = {n: _grad(self.params[n]) for n in names}
            nbytes += self._request(
                socks[k], k, kind, job.iteration, job.segment, req, names, tensors
            )
        deadline = time.monotonic() + self.reply_timeout_s
        self._flights[req] = _Flight(job, groups, sent, lead, deadline, nbytes, tensors=pushed)

    def _poll_ms(self) -> int:
        """How long the poll may wait: until a reply is overdue, a plain gradient event is
        looked at again, or at most a second (the wake pipe ends it early)."""
        wait = 1.0
        if self._backlog and self._backlog[0].direction == "push":
            job = self._backlog[0]
            with self._lock:
                ready = self._grad_ready.get((job.iteration, job.segment))
            if not isinstance(ready, Signal):
                wait = PLAIN_EVENT_POLL_S
        if self._flights:
            first = min(f.deadline for f in self._flights.values())
            wait = min(wait, max(0.0, first - time.monotonic()))
        return int(wait * 1000)

    def _receive(self, sock: zmq.SyncSocket, k: int) -> None:
        """Keep every reply waiting on shard ``k``'s socket with the request it answers."""
        while sock.poll(0, zmq.POLLIN):
            # (a pull's tensors of several frames are copied into the parameters frame by
            # frame when the pull is applied, never joined first)
            got = self.transport.recv(sock, messages.TO_TRAINER, join=False)
            if got is None:
                continue
            msg = got[1]
            req = msg.meta.get("req")
            if req == messages.RESENT_REQ and msg.type == messages.ACK:
                continue  # a push sent again to a rebuilt shard: nothing waits for it
            flight = None
            if isinstance(req, int) and not isinstance(req, bool):
                flight = self._flights.get(req)
            want = None
            if flight is not None:
                want = messages.PARAMS if flight.job.direction == "pull" else messages.ACK
            if (
                flight is None
                or msg.type != want
                or msg.meta.get("iter") != flight.job.iteration
                or msg.meta.get("seg") != flight.job.segment
                or k not in flight.groups
                or k in flight.replies
            ):
                self.transport.traffic.drop("unexpected_reply", msg.sender)
                continue
            flight.replies[k] = msg
            if flight.answered:
                flight.arrived = time.perf_counter()

    def _retire(self) -> None:
        """Apply the answers of the transmissions at the head of the flight list, in the order
        they went out, as far as every shard has answered."""
        while self._flights and self.error is None:
            req, flight = next(iter(self._flights.items()))
            if not flight.answered:
                return
            del self._flights[req]
            self._finish(flight)

    def _finish(self, flight: _Flight) -> None:
        job = flight.job
        held = 0.0
        nbytes = flight.nbytes
        for k in sorted(flight.groups):
            reply = flight.replies[k]
            held = max(held, float(reply.meta.get("held_s", 0.0) or 0.0))
            names = flight.groups[k]
            if job.direction == "pull":
                self._copy_in(reply, names, k)
                if self.error is not None:
                    job.done.set()
                    return
                nbytes += reply.tensor_bytes
                version = reply.meta.get("version")
                if is_count(version):
                    assert isinstance(version, int)
                    self.versions.update(dict.fromkeys(names, version))
                    if self.kept is not None:
                        self.kept.pulled(names, version)
            else:
                self.pushed.update(dict.fromkeys(names, job.iteration))
                if self.kept is not None:
                    self.kept.pushed(job.iteration, flight.tensors[k])
        end = time.perf_counter()
        d = job.direction
        start = flight.sent if flight.lead else max(flight.sent, self._last_end[d])
        self._last_end[d] = end
        self.log.append(
            Transmission(
                d,
                job.iteration,
                job.segment,
                nbytes,
                start,
                end,
                held,
                flight.sent,
                flight.lead,
                flight.arrived or end,
            )
        )
        job.done.set()

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        with self._lock:
            lost = set(self.lost)
        for flight in self._flights.values():
            missing = set(flight.groups) - set(flight.replies) - lost
            if now > flight.deadline and missing:
                job = flight.job
                k = min(missing)
                self.error = (
                    f"parameter server {k} did not answer {job.direction} {job.segment} of "
                    f"iteration {job.iteration} within {self.reply_timeout_s:.0f} s"
                )
                return

    def _release_all(self) -> None:
        """After an error: every waiting job is done (the main thread then sees the error)."""
        for flight in self._flights.values():
            flight.job.done.set()
        for job in self._backlog:
            job.done.set()
        self._flights.clear()
        self._backlog.clear()

    # ------------------------------------------------------------------ a rebuilt shard

    def _reconnect(self, socks: dict[int, zmq.SyncSocket], poller: zmq.Poller) -> None:
        """Every shard that is back: connect to its new endpoint, send it this trainer's copy
        of its tensors, then again what it must answer or apply."""
        while True:
            try:
                k, endpoint = self._back.get_nowait()
            except queue.Empty:
                return
            old = socks.pop(k, None)
            if old is not None:
                poller.unregister(old)
                old.close(linger=0)  # (what the dead shard sent and was not read is asked again)
            sock = self.transport.connect(zmq.DEALER, endpoint, identity=self.transport.name)
            socks[k] = sock
            poller.register(sock, zmq.POLLIN)
            self.endpoints[k] = endpoint
            nbytes = self._send_state(sock, k)
            pulls, pushes, kept = self._resend(sock, k)
            with self._lock:
                self.lost.discard(k)
            self.recoveries.append(
                {"shard": k, "at": time.time(), "state_bytes": nbytes,
                 "pulls_resent": pulls, "pushes_resent": pushes, "kept_resent": kept}
            )  # fmt: skip

    def _send_state(self, sock: zmq.SyncSocket, k: int) -> int:
        """This trainer's copy of shard ``k``'s tensors it has pulled, with their versions."""
        owned = self.layout.owned(k)
        names = [n for n in owned if n in self.versions]
        meta = {
            "layout": self.layout.digest,
            "names": names,
            "versions": {n: self.versions[n] for n in names},
            "pushed": {n: self.pushed[n] for n in owned if n in self.pushed},
        }
        tensors = {n: self.params[n].detach().cpu().numpy() for n in names}
        msg = self.transport.message(messages.STATE, meta, tensors)
        return self.transport.send(sock, msg, peer=f"ps{k}")

    def _resend(self, sock: zmq.SyncSocket, k: int) -> tuple[int, int, int]:
        """Send shard ``k`` again every request of the flights it has not answered, every push
        in flight (an acknowledgement is not an update), and the kept pushes whose update no
        pull has shown; returns how many of each."""
        pulls = pushes = 0
        covered: set[str] = set()
        deadline = time.monotonic() + self.reply_timeout_s
        for req, flight in self._flights.items():
            if k not in flight.groups:
                continue
            job, names = flight.job, flight.groups[k]
            if job.direction == "pull" and k in flight.replies:
                continue
            tensors: dict[str, np.ndarray] = {}
            if job.direction == "push":
                flight.replies.pop(k, None)
                tensors = flight.tensors[k]
                covered.update(names)
                pushes += 1
            else:
                pulls += 1
            kind = messages.PULL if job.direction == "pull" else messages.PUSH
            self._request(sock, k, kind, job.iteration, job.segment, req, names, tensors)
            flight.deadline = deadline
        kept = self.kept.of(self.layout.owned(k), covered) if self.kept is not None else {}
        for it, arrays in kept.items():
            names = list(arrays)
            self._request(sock, k, messages.PUSH, it, 0, messages.RESENT_REQ, names, arrays)
        return pulls, pushes, len(kept)

    def _request(
        self,
        sock: zmq.SyncSocket,
        k: int,
        kind: str,
        iteration: int,
        segment: int,
        req: int,
        names: list[str],
        tensors: dict[str, np.ndarray],
    ) -> int:
        """Send shard ``k`` one pull or push; the bytes put on the wire."""
        meta = {
            "iter": iteration,
            "seg": segment,
            "req": req,
            "names": names,
            "layout": self.layout.digest,
        }
        msg = self.transport.message(kind, meta, tensors)
        return self.transport.send(sock, msg, peer=f"ps{k}")

    def _copy_in(self, reply: Message, names: list[str], k: int) -> None:
        problem = messages.copy_in(self.params, reply.tensors, names, reply.chunked)
        if problem is not None:
            self.error = f"parameter server {k} {problem}"


def _grad(p: torch.Tensor) -> np.ndarray:
    """A parameter's gradient as an array (zeros if it got none this iteration)."""
    if p.grad is None:
        return np.zeros(tuple(p.shape), dtype=np.float32)
    return p.grad.detach().cpu().numpy()  # (no copy on the CPU)
