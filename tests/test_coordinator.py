"""The coordinator's protocol, driven in-process by raw DEALER sockets."""

from __future__ import annotations

import zmq

from edgetrain.comm import channel, protocol
from edgetrain.comm.coordinator import Coordinator
from edgetrain.comm.wire import Message

RUN = "run-xyz"


class FakeWorker:
    def __init__(self, ctx: zmq.Context, endpoint: str, wid: int, identity: str | None = None):
        self.wid = wid
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, (identity or protocol.worker_name(wid)).encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def send(self, kind: str, meta: dict | None = None, epoch: int = 0) -> None:
        msg = Message(kind, protocol.worker_name(self.wid), RUN, epoch=epoch, meta=meta or {})
        channel.send(self.sock, msg)

    def expect(self, kind: str) -> Message:
        assert self.sock.poll(5000), f"worker {self.wid}: nothing received, wanted {kind}"
        got = channel.recv(self.sock, RUN)
        assert got is not None and got[1].type == kind, got
        return got[1]

    def nothing(self) -> bool:
        return not self.sock.poll(50)


def pump(coord: Coordinator, want: str, count: int = 1, rounds: int = 250) -> list:
    """Poll until ``count`` events of kind ``want`` arrived (at most 5 s)."""
    events = []
    for _ in range(rounds):
        events += coord.poll(20)
        if sum(e.kind == want for e in events) >= count:
            return events
    raise AssertionError(f"no {want!r} event; got {[e.kind for e in events]}")


def test_phases_barrier_and_drain_accounting() -> None:
    ctx = zmq.Context()
    coord = Coordinator(RUN, {"workers": [{"count": 2}]}, 2, sync_epochs=True, context=ctx)
    a, b = (FakeWorker(ctx, coord.endpoint, i) for i in range(2))
    intruder = FakeWorker(ctx, coord.endpoint, 1, identity="w9")  # claims to be w1
    try:
        intruder.send(protocol.REGISTER, {"endpoint": "tcp://x:1"})
        for _ in range(250):
            if coord.poll(20) or coord.traffic.dropped["bad_sender"]:
                break
        assert coord.traffic.dropped["bad_sender"] == 1
        assert coord.workers[1].status == "pending"
        for w in (a, b):
            w.send(protocol.REGISTER, {"endpoint": f"tcp://127.0.0.1:{1000 + w.wid}", "host": "h"})
        pump(coord, "registered", count=2)
        assert a.expect(protocol.WELCOME).meta["recipe"] == {"workers": [{"count": 2}]}
        b.expect(protocol.WELCOME)
        a.send(protocol.READY)
        pump(coord, "ready")
        assert a.nothing()  # no start until everyone is ready
        b.send(protocol.READY)
        pump(coord, "started")
        assert a.expect(protocol.START).meta["peers"] == {
            "0": "tcp://127.0.0.1:1000",
            "1": "tcp://127.0.0.1:1001",
        }
        b.expect(protocol.START)
        a.send(protocol.EPOCH_END, {"loss": 1.0}, epoch=1)
        pump(coord, "epoch")
        assert a.nothing()  # barrier holds until b ends epoch 1
        b.send(protocol.EPOCH_END, {"loss": 1.0}, epoch=1)
        pump(coord, "barrier")
        assert a.expect(protocol.GO).epoch == 2
        assert b.expect(protocol.GO).epoch == 2
        a.send(protocol.DONE, {"sent": {"1": 7}})
        b.send(protocol.DONE, {"sent": {"0": 3}})
        pump(coord, "draining")
        assert a.expect(protocol.DRAIN).meta == {"expect": 3, "expect_from": {"1": 3}}
        assert b.expect(protocol.DRAIN).meta == {"expect": 7, "expect_from": {"0": 7}}
        assert coord.phase == "draining" and coord.waiting_on() == [0, 1]
    finally:
        for s in (a, b, intruder):
            s.sock.close(0)
        coord.close()
        ctx.term()


def test_worker_error_is_reported_as_data() -> None:
    ctx = zmq.Context()
    coord = Coordinator(RUN, {}, 1, context=ctx)
    w = FakeWorker(ctx, coord.endpoint, 0)
    try:
        w.send(protocol.REGISTER, {"endpoint": "tcp://127.0.0.1:9"})
        pump(coord, "registered")
        w.send(protocol.ERROR, {"message": "out of memory"})
        events = pump(coord, "error")
        assert any(e.kind == "error" and e.data["message"] == "out of memory" for e in events)
        assert coord.workers[0].status == "failed" and coord.alive == []
    finally:
        w.sock.close(0)
        coord.close()
        ctx.term()
