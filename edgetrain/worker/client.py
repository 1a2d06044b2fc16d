"""A worker's connection to the coordinator: register, report, and wait for instructions."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import zmq

from edgetrain.comm import channel, protocol
from edgetrain.comm.channel import Traffic
from edgetrain.comm.wire import Message
from edgetrain.errors import RunError


class StopRequested(Exception):
    """The coordinator told this worker to stop."""


class CoordinatorClient:
    """A DEALER socket to the coordinator, identified as ``w<id>``."""

    def __init__(
        self, ctx: zmq.Context, endpoint: str, worker_id: int, run_id: str, traffic: Traffic
    ) -> None:
        self.worker_id = worker_id
        self.name = protocol.worker_name(worker_id)
        self.run_id = run_id
        self.traffic = traffic
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, self.name.encode())
        self.sock.setsockopt(zmq.LINGER, 2000)
        self.sock.connect(endpoint)

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
        channel.send(self.sock, msg, self.traffic)

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
        raise RunError(
            f"worker {self.worker_id}: no '{kind}' from the coordinator in {timeout_s:.0f} s"
        )

    def close(self) -> None:
        self.sock.close()
