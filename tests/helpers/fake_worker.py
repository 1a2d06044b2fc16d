"""A coordinator driven in-process by raw DEALER sockets posing as workers."""

from __future__ import annotations

from typing import Any

import numpy as np
import zmq

from edgetrain.comm import channel, protocol
from edgetrain.comm.control import Event, assign_roles
from edgetrain.comm.coordinator import Coordinator
from edgetrain.comm.wire import Message

RUN = "run-xyz"


class FakeWorker:
    """A worker's DEALER socket: send any message, expect the coordinator's next one."""

    def __init__(self, ctx: zmq.Context, endpoint: str, wid: int, identity: str | None = None):
        self.wid = wid
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, (identity or protocol.worker_name(wid)).encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.seq = 0  # the last numbered message received

    def send(
        self,
        kind: str,
        meta: dict[str, Any] | None = None,
        epoch: int = 0,
        tensors: dict[str, np.ndarray] | None = None,
    ) -> None:
        msg = Message(
            kind, protocol.worker_name(self.wid), RUN, epoch=epoch, meta=meta or {},
            tensors=tensors or {},
        )  # fmt: skip
        channel.send(self.sock, msg)

    def expect(self, kind: str, timeout_ms: int = 5000) -> Message:
        """The coordinator's next new message, which must be of type ``kind`` (resends of
        messages already received are skipped, as a real worker does)."""
        while True:
            assert self.sock.poll(timeout_ms), f"worker {self.wid}: nothing received, wanted {kind}"
            got = channel.recv(self.sock, RUN)
            assert got is not None
            msg = got[1]
            seq = msg.meta.get("seq")
            if isinstance(seq, int) and seq <= self.seq:
                continue
            if isinstance(seq, int):
                assert seq == self.seq + 1, f"out of order: {seq} after {self.seq}"
                self.seq = seq
            assert msg.type == kind, msg
            return msg

    def nothing(self, coord: Coordinator) -> bool:
        """True if nothing new waits for this worker. The coordinator is single-threaded: after
        one more poll it has handled (and answered) everything sent to it so far, so a message
        that is not here now was never sent."""
        coord.poll(0)
        return not self.sock.poll(50)

    def close(self) -> None:
        self.sock.close(0)


def pump(coord: Coordinator, want: str, count: int = 1, rounds: int = 250) -> list[Event]:
    """Poll until ``count`` events of kind ``want`` arrived (at most 5 s)."""
    events: list[Event] = []
    for _ in range(rounds):
        events += coord.poll(20)
        if sum(e.kind == want for e in events) >= count:
            return events
    raise AssertionError(f"no {want!r} event; got {[e.kind for e in events]}")


def started(ctx: zmq.Context, n: int = 3, **kw: Any) -> tuple[Coordinator, list[FakeWorker]]:
    """A coordinator with ``n`` fake trainers registered, ready and started."""
    coord = Coordinator(RUN, {}, assign_roles(["trainer"] * n), context=ctx, **kw)
    workers = [FakeWorker(ctx, coord.endpoint, i) for i in range(n)]
    for w in workers:
        w.send(protocol.REGISTER, {"host": f"h{w.wid}"})
    pump(coord, "registered", count=n)
    for w in workers:
        w.expect(protocol.WELCOME)
        w.send(protocol.READY, {"endpoints": {"gossip": f"tcp://127.0.0.1:{1000 + w.wid}"}})
    pump(coord, "started")
    for w in workers:
        w.expect(protocol.START)
    return coord, workers
