"""A worker's connection to the coordinator: register, report, and wait for instructions."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import zmq

from edgetrain.comm import channel, protocol, sockets
from edgetrain.comm.channel import Traffic
from edgetrain.comm.security import CurveKeys
from edgetrain.comm.wire import Message
from edgetrain.errors import RunError


class StopRequested(Exception):
    """The coordinator told this worker to stop."""


class CoordinatorClient:
    """A DEALER socket to the coordinator, identified as ``w<id>``."""

    def __init__(
        self,
        ctx: zmq.Context,
        endpoint: str,
        worker_id: int,
        run_id: str,
        traffic: Traffic,
        security: CurveKeys | None = None,
    ) -> None:
        self.security = security
        self.worker_id = worker_id
        self.name = protocol.worker_name(worker_id)
        self.run_id = run_id
        self.traffic = traffic
        self.ctx = ctx
        self.endpoint = endpoint
        self.sock = self._make_socket(self.name)
        self._heartbeat: Heartbeat | None = None
        # Called with each coordinator message that nobody waits for (``peers`` updates).
        self.on_message: Callable[[Message], None] | None = None

    def _make_socket(self, identity: str) -> zmq.Socket:
        """A DEALER connected to the coordinator under ``identity``."""
        opts = sockets.SocketOptions(linger_ms=2000)
        sock = sockets.client(self.ctx, zmq.DEALER, self.security, opts, identity.encode())
        sock.connect(self.endpoint)
        return sock

    def start_heartbeat(self, interval_s: float) -> None:
        """Send a heartbeat every ``interval_s`` from a thread of its own, until :meth:`close`.

        The thread has its own socket (identity ``w<id>.hb``): ZeroMQ sockets are not shared
        between threads. A worker busy in a long step still heartbeats; a stopped or dead one
        does not, and the coordinator declares it failed after three missed intervals.
        """
        if self._heartbeat is None:
            sock = self._make_socket(protocol.heartbeat_identity(self.worker_id))
            self._heartbeat = Heartbeat(sock, self.name, self.run_id, interval_s)
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
        msg = Message(kind, self.name, self.run_id, step, epoch, meta or {}, tensors or {})
        try:
            channel.send(self.sock, msg, self.traffic)
        except zmq.Again:
            raise RunError(
                f"worker {self.worker_id}: the coordinator at {self.endpoint} took no '{kind}' "
                "message within the send timeout; is the launcher gone or the network down?"
            ) from None

    def receive(self) -> Message | None:
        """Read one waiting message (None if it was malformed and dropped)."""
        got = channel.recv(self.sock, self.run_id, protocol.TO_WORKER, self.traffic)
        if got is None:
            return None
        msg = got[1]
        if msg.sender != protocol.COORDINATOR:
            self.traffic.dropped["bad_sender"] += 1
            return None
        if msg.type == protocol.STOP:
            raise StopRequested()
        return msg

    def wait_for(
        self,
        kind: str,
        timeout_s: float,
        other: zmq.Socket | None = None,
        on_other: Callable[[], None] | None = None,
    ) -> Message:
        """Wait for a message of type ``kind``, serving ``other`` (the gossip inbox) meanwhile."""
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        if other is not None:
            poller.register(other, zmq.POLLIN)
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            ready = dict(poller.poll(max(1, int(min(left, 0.5) * 1000))))
            if other is not None and on_other is not None and other in ready:
                on_other()
            if self.sock in ready:
                msg = self.receive()
                if msg is not None and msg.type == kind:
                    return msg
                if msg is not None and self.on_message is not None:
                    self.on_message(msg)
        raise RunError(
            f"worker {self.worker_id}: no '{kind}' from the coordinator in {timeout_s:.0f} s"
        )

    def dispatch(self) -> None:
        """Hand every message already waiting from the coordinator to :attr:`on_message`."""
        while self.sock.poll(0, zmq.POLLIN):
            msg = self.receive()
            if msg is not None and self.on_message is not None:
                self.on_message(msg)

    def close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
        self.sock.close()


class Heartbeat(threading.Thread):
    """Sends ``heartbeat`` messages at a fixed interval on its own socket."""

    def __init__(self, sock: zmq.Socket, sender: str, run_id: str, interval_s: float) -> None:
        super().__init__(daemon=True, name="heartbeat")
        self.sock = sock
        self.msg = Message(protocol.HEARTBEAT, sender, run_id)
        self.interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while True:
                with contextlib.suppress(zmq.Again):
                    channel.send(self.sock, self.msg, flags=zmq.NOBLOCK)
                if self._stop_event.wait(self.interval_s):
                    return
        finally:
            self.sock.close(linger=0)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)
