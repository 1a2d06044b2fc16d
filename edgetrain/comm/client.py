"""A worker's connection to the coordinator: register, report, wait, and never lose an order.

The coordinator numbers what it sends; the client delivers each number once, in order
(:class:`~edgetrain.comm.control.InOrder`), acknowledges the highest one in its heartbeats, and
when it has waited three heartbeat intervals without hearing anything it asks the coordinator
(``sync``) to send again whatever came after that number. A ``go`` lost while a worker's
connection was being re-established is therefore late by a few seconds, not an hour.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import zmq

from edgetrain.comm import activity, channel, protocol, sockets
from edgetrain.comm.channel import Traffic
from edgetrain.comm.control import InOrder
from edgetrain.comm.security import CurveKeys
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import DEFAULT_LIMITS, Limits, Message
from edgetrain.errors import RunError

# what a worker waiting for the coordinator's message of a kind is waiting for (activity)
WAITS = {
    protocol.WELCOME: "its welcome",
    protocol.START: "the start (every worker ready)",
    protocol.GO: "the epoch barrier (every worker's epoch)",
    protocol.DRAIN: "the drain (every worker done)",
    protocol.REWIND: "the rewind (the lost stage back)",
}
# A wait asks the coordinator for its state after this many heartbeat intervals of silence,
# and gives up on a coordinator that answers none of this many such requests in a row.
SYNC_AFTER_HEARTBEATS = 3
UNANSWERED_SYNCS = 4
# A message whose tensors are larger than this is announced in a heartbeat before it is sent
# (:func:`activity.sending`): it may hold the worker's link, and its heartbeats, for seconds.
BULK_BYTES = activity.BULK_BYTES

Serve = Sequence[tuple[zmq.Socket[bytes], Callable[[], None]]]


class StopRequested(Exception):
    """The coordinator told this worker to stop."""


class CoordinatorClient:
    """A DEALER socket to the coordinator, identified as ``w<id>.<random>``.

    With the run's ``secret``, every message carries the worker's token (``meta["auth"]``,
    :func:`protocol.auth_token`); ``limits`` bound what the socket takes in."""

    def __init__(
        self,
        ctx: zmq.SyncContext,
        endpoint: str,
        worker_id: int,
        run_id: str,
        traffic: Traffic,
        security: CurveKeys | None = None,
        heartbeat_s: float = 1.0,
        secret: str | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.transport = Transport(ctx, run_id, worker_id, traffic, security, limits=limits)
        self.auth = protocol.auth_token(secret, run_id, worker_id) if secret else None
        self.worker_id = worker_id
        self.name = self.transport.name
        self.endpoint = endpoint
        self.heartbeat_s = heartbeat_s
        self.sock = self._make_socket(protocol.socket_identity(self.name))
        self._heartbeat: Heartbeat | None = None
        self._bulk_until = 0.0  # until when our last bulk send may hold the link (monotonic)
        self._order = InOrder()
        self._ready: deque[Message] = deque()
        self._heard = time.monotonic()  # when the coordinator last said anything
        self._synced = 0.0  # when this client last asked for a resend
        self.phase: str | None = None  # the coordinator's phase, from its last ``state``
        self.syncs = 0  # resend requests sent
        # Called with each coordinator message that nobody waits for (``peers`` updates).
        self.on_message: Callable[[Message], None] | None = None

    @property
    def acked(self) -> int:
        """The highest message number received with every one before it."""
        return self._order.delivered

    def _make_socket(self, identity: str) -> zmq.SyncSocket:
        """A DEALER connected to the coordinator under ``identity``."""
        opts = sockets.SocketOptions(linger_ms=2000)
        return self.transport.connect(zmq.DEALER, self.endpoint, opts, identity)

    def start_heartbeat(self, interval_s: float) -> None:
        """Send a heartbeat every ``interval_s`` from a thread of its own, until :meth:`close`.

        The thread has its own socket (identity ``w<id>.hb.<random>``): ZeroMQ sockets are not
        shared between threads. A worker busy in a long step still heartbeats; a stopped or dead one
        does not, and the coordinator declares it failed after three missed intervals. Each
        heartbeat acknowledges the control messages received so far.
        """
        self.heartbeat_s = interval_s
        if self._heartbeat is None:
            sock = self._make_socket(
                protocol.socket_identity(protocol.heartbeat_identity(self.worker_id))
            )
            self._heartbeat = Heartbeat(sock, self.name, self.transport.run_id, interval_s, self)
            self._heartbeat.start()

    def send(
        self,
        kind: str,
        meta: dict[str, Any] | None = None,
        *,
        epoch: int = 0,
        step: int = 0,
        tensors: dict[str, np.ndarray] | None = None,
    ) -> None:
        if self.auth is not None:
            meta = {**(meta or {}), protocol.AUTH: self.auth}
        msg = self.transport.message(kind, meta, tensors, step=step, epoch=epoch)
        nbytes = activity.tensor_bytes(tensors or {})
        if nbytes > BULK_BYTES:
            activity.sending(nbytes)
            self._bulk_until = time.monotonic() + activity.transfer_s(nbytes)
            if self._heartbeat is not None:  # the announcement goes ahead of the bytes
                self._heartbeat.beat_now()
        try:
            self.transport.send(self.sock, msg, peer=protocol.COORDINATOR)
        except zmq.Again:
            raise RunError(
                f"worker {self.worker_id}: the coordinator at {self.endpoint} took no '{kind}' "
                "message within the send timeout; is the launcher gone or the network down?"
            ) from None

    def _read(self) -> None:
        """Read one message from the socket into the in-order queue."""
        got = self.transport.recv(self.sock, protocol.TO_WORKER)
        if got is None:
            return
        msg = got[1]
        if msg.sender != protocol.COORDINATOR:
            self.transport.traffic.drop("bad_sender", msg.sender)
            return
        self._heard = time.monotonic()
        if msg.type == protocol.STATE:
            incoming = msg.meta.get("incoming")  # the bytes of the coordinator's next message
            if isinstance(incoming, int) and not isinstance(incoming, bool):
                if 0 <= incoming < activity.MAX_BYTES:  # its answers wait behind them
                    until = self._heard + activity.transfer_s(incoming)
                    self._bulk_until = max(self._bulk_until, until)
                return
            phase = msg.meta.get("phase")
            self.phase = phase if isinstance(phase, str) else None
            return
        if msg.type == protocol.STOP:  # final: obeyed at once, whatever came before it
            self._ready.append(msg)
            return
        seq = msg.meta.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            self.transport.traffic.drop("bad_seq", msg.sender)
            return
        self._ready.extend(self._order.accept(seq, msg))

    def _next(self) -> Message | None:
        """The next message in order, if one is here; ``stop`` raises :class:`StopRequested`."""
        if not self._ready:
            return None
        msg = self._ready.popleft()
        if msg.type == protocol.STOP:
            raise StopRequested()
        return msg

    def _maybe_sync(self, now: float, since: float) -> None:
        """After three quiet heartbeat intervals of a wait that began at ``since``, ask the
        coordinator to resend what we lack; give up on a coordinator that stays silent through
        :data:`UNANSWERED_SYNCS` such requests."""
        every = SYNC_AFTER_HEARTBEATS * self.heartbeat_s
        quiet = now - max(self._heard, since)
        if now - max(self._heard, since, self._synced) < every:
            return
        # our own bulk send in flight holds our requests, and so the answers, behind it
        if now - max(self._heard, since, self._bulk_until) >= (UNANSWERED_SYNCS + 1) * every:
            raise RunError(
                f"worker {self.worker_id}: the coordinator at {self.endpoint} has not answered "
                f"for {quiet:.0f} s; is the launcher gone or the network down?"
            )
        self.syncs += 1
        self._synced = now
        self.send(protocol.SYNC, {"have": self.acked})

    def wait_for(
        self,
        kind: str,
        timeout_s: float,
        serve: Serve = (),
        sync: bool = True,
        idle: Callable[[], float] | None = None,
    ) -> Message:
        """Wait for the next message of type ``kind``, serving ``serve`` (sockets with their
        handlers, e.g. a gossip inbox) meanwhile. Messages of other types that come first go to
        :attr:`on_message`, in order. With ``sync`` (once registered), a long silence asks the
        coordinator to resend what this worker lacks. ``idle`` is called on every turn of the
        loop and returns how long it may sleep before it must be called again (a server's
        timers)."""
        with activity.waiting("coordinator", WAITS.get(kind, kind)):
            return self._wait_for(kind, timeout_s, serve, sync, idle)

    def _wait_for(
        self,
        kind: str,
        timeout_s: float,
        serve: Serve,
        sync: bool,
        idle: Callable[[], float] | None,
    ) -> Message:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        handlers = dict(serve)
        for sock in handlers:
            poller.register(sock, zmq.POLLIN)
        since = time.monotonic()
        deadline = since + timeout_s
        while True:
            while (msg := self._next()) is not None:
                if msg.type == kind:
                    return msg
                if self.on_message is not None:
                    self.on_message(msg)
            now = time.monotonic()
            if now >= deadline:
                raise RunError(
                    f"worker {self.worker_id}: no '{kind}' from the coordinator in "
                    f"{timeout_s:.0f} s"
                )
            if sync:
                self._maybe_sync(now, since)
            wait = min(deadline - now, 0.5, self.heartbeat_s)
            if idle is not None:
                wait = max(0.0, min(wait, idle()))
            ready = dict(
                poller.poll(max(0, int(wait * 1000)) if idle else max(1, int(wait * 1000)))
            )
            for sock, handler in handlers.items():
                if sock in ready:
                    handler()
            if self.sock in ready:
                while self.sock.poll(0, zmq.POLLIN):
                    self._read()

    def dispatch(self) -> None:
        """Hand every message already waiting from the coordinator to :attr:`on_message`."""
        while self.sock.poll(0, zmq.POLLIN):
            self._read()
        while (msg := self._next()) is not None:
            if self.on_message is not None:
                self.on_message(msg)

    def close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
        self.sock.close()


class Heartbeat(threading.Thread):
    """Sends ``heartbeat {ack}`` messages at a fixed interval on its own socket."""

    def __init__(
        self,
        sock: zmq.SyncSocket,
        sender: str,
        run_id: str,
        interval_s: float,
        client: CoordinatorClient | None = None,
    ) -> None:
        super().__init__(daemon=True, name="heartbeat")
        self.sock = sock
        self.sender = sender
        self.run_id = run_id
        self.interval_s = interval_s
        self.client = client
        self._stop_event = threading.Event()
        self._wake = threading.Event()  # beat now, not at the interval's end
        # beats begun (the activity read) and handed to the socket, counted
        self._beats_begun = self._beats_sent = 0
        self._beat = threading.Condition()

    def run(self) -> None:
        try:
            while True:
                with self._beat:
                    self._beats_begun += 1
                    beat = self._beats_begun
                meta: dict[str, Any] = {"ack": 0, "doing": activity.snapshot()}
                if self.client is not None:
                    meta["ack"] = self.client.acked
                    if self.client.auth is not None:
                        meta[protocol.AUTH] = self.client.auth
                msg = Message(protocol.HEARTBEAT, self.sender, self.run_id, meta=meta)
                with contextlib.suppress(zmq.Again):
                    channel.send(self.sock, msg, flags=zmq.NOBLOCK)
                with self._beat:
                    self._beats_sent = beat
                    self._beat.notify_all()
                self._wake.wait(self.interval_s)
                self._wake.clear()
                if self._stop_event.is_set():
                    return
        finally:
            self.sock.close(linger=0)

    def beat_now(self, timeout_s: float = 1.0) -> bool:
        """Send a heartbeat now (with the activity as it is now) and wait, at most
        ``timeout_s``, until it is handed to the socket; False if it was not in time."""
        with self._beat:
            after = self._beats_begun  # a beat begun later reads the activity as it is now
            self._wake.set()
            return self._beat.wait_for(lambda: self._beats_sent > after, timeout_s)

    def stop(self) -> None:
        self._stop_event.set()
        self._wake.set()
        self.join(timeout=5)
