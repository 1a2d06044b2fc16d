"""The coordinator's protocol, driven in-process by raw DEALER sockets posing as workers."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import zmq

from edgetrain.comm import protocol
from edgetrain.comm.control import CoordinationPolicy, Decision, Role, assign_roles
from edgetrain.comm.coordinator import Coordinator
from edgetrain.gossip.drain import GossipController
from tests.helpers.fake_worker import RUN, FakeWorker, pump, started


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def _register(coord: Coordinator, workers: list[FakeWorker]) -> None:
    for w in workers:
        w.send(protocol.REGISTER, {"host": f"h{w.wid}"})
    pump(coord, "registered", count=len(workers))
    for w in workers:
        w.expect(protocol.WELCOME)


def test_phases_barrier_and_drain_directives(ctx: zmq.Context) -> None:
    roles = assign_roles(["trainer", "trainer"])
    coord = Coordinator(
        RUN, {"workers": [{"count": 2}]}, roles, controller=GossipController(), context=ctx
    )
    a, b = (FakeWorker(ctx, coord.endpoint, i) for i in range(2))
    intruder = FakeWorker(ctx, coord.endpoint, 1, identity="w9")  # claims to be w1
    try:
        intruder.send(protocol.REGISTER, {})
        for _ in range(250):
            if coord.poll(20) or coord.traffic.dropped["bad_sender"]:
                break
        assert coord.traffic.dropped["bad_sender"] == 1
        assert coord.workers[1].status == "pending"
        for w in (a, b):
            w.send(protocol.REGISTER, {"host": "h", "role": f"trainer:{w.wid}"})
        pump(coord, "registered", count=2)
        welcome = a.expect(protocol.WELCOME)
        assert welcome.meta["recipe"] == {"workers": [{"count": 2}]}
        assert welcome.meta["role"] == "trainer:0" and welcome.meta["seq"] == 1
        b.expect(protocol.WELCOME)
        a.send(protocol.READY, {"endpoints": {"gossip": "tcp://127.0.0.1:1000"}, "samples": 9})
        pump(coord, "ready")
        assert a.nothing(coord)  # no start until everyone is ready
        b.send(protocol.READY, {"endpoints": {"gossip": "tcp://127.0.0.1:1001"}})
        pump(coord, "started")
        start = a.expect(protocol.START)
        assert start.meta["roster"] == {
            "0": {"role": "trainer", "index": 0, "host": "h", "endpoints": {"gossip": "tcp://127.0.0.1:1000"}},
            "1": {"role": "trainer", "index": 1, "host": "h", "endpoints": {"gossip": "tcp://127.0.0.1:1001"}},
        }  # fmt: skip
        assert start.meta["barriers"] is True and start.meta["directive"] == {}
        b.expect(protocol.START)
        a.send(protocol.EPOCH_END, {"loss": 1.0}, epoch=1)
        pump(coord, "epoch")
        assert a.nothing(coord)  # the barrier holds until b ends epoch 1
        b.send(protocol.EPOCH_END, {"loss": 1.0}, epoch=1)
        pump(coord, "barrier")
        assert a.expect(protocol.GO).epoch == 2
        assert b.expect(protocol.GO).epoch == 2
        a.send(protocol.DONE, {"sent": {"1": 7}})
        b.send(protocol.DONE, {"sent": {"0": 3}})
        pump(coord, "draining")
        assert a.expect(protocol.DRAIN).meta["directive"] == {"expect_from": {"1": 3}}
        assert b.expect(protocol.DRAIN).meta["directive"] == {"expect_from": {"0": 7}}
        assert coord.phase == "draining" and coord.waiting_on() == [0, 1]
    finally:
        for s in (a, b, intruder):
            s.close()
        coord.close()


def test_worker_error_is_reported_as_data(ctx: zmq.Context) -> None:
    coord = Coordinator(RUN, {}, assign_roles(["trainer"]), context=ctx)
    w = FakeWorker(ctx, coord.endpoint, 0)
    try:
        w.send(protocol.REGISTER, {})
        pump(coord, "registered")
        w.send(protocol.ERROR, {"message": "out of memory"})
        events = pump(coord, "error")
        assert any(e.kind == "error" and e.data["message"] == "out of memory" for e in events)
        assert coord.workers[0].status == "failed" and coord.alive == []
    finally:
        w.close()
        coord.close()


def test_a_register_with_the_wrong_role_is_refused(ctx: zmq.Context) -> None:
    coord = Coordinator(RUN, {}, [Role("server", 0), Role("trainer", 0)], context=ctx)
    w = FakeWorker(ctx, coord.endpoint, 0)
    try:
        w.send(protocol.REGISTER, {"role": "trainer:0"})  # worker 0 is server 0
        for _ in range(100):
            coord.poll(20)
            if coord.traffic.dropped["bad_register"]:
                break
        assert coord.traffic.dropped["bad_register"] == 1 and coord.workers[0].status == "pending"
    finally:
        w.close()
        coord.close()


class Recording:
    """A controller that records what it was asked and answers from a table."""

    def __init__(self, halt_at: int | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.halt_at = halt_at

    def on_start(self, ready: Mapping[int, Mapping[str, Any]]) -> Decision:
        self.calls.append(("start", {i: dict(r) for i, r in ready.items()}))
        return Decision({i: {"batch": 8 * (i + 1)} for i in ready})

    def on_barrier(self, epoch: int, reports: Mapping[int, Mapping[str, Any]]) -> Decision:
        self.calls.append(("barrier", (epoch, sorted(reports))))
        halt = "two workers too slow" if epoch == self.halt_at else None
        return Decision({i: {"ratio": 1.0 / (i + 1)} for i in reports}, halt)

    def on_drain(self, done: Mapping[int, Mapping[str, Any]]) -> Decision:
        self.calls.append(("drain", sorted(done)))
        return Decision({i: {"drain": i} for i in done})


def test_directives_reach_each_worker_and_servers_skip_epochs(ctx: zmq.Context) -> None:
    roles = [Role("server", 0), Role("trainer", 0), Role("trainer", 1)]
    policy = CoordinationPolicy(
        epoch_roles=frozenset({"trainer"}), fatal_roles=frozenset({"server"})
    )
    ctl = Recording()
    coord = Coordinator(RUN, {}, roles, policy, ctl, context=ctx, epochs=2)
    server, t0, t1 = (FakeWorker(ctx, coord.endpoint, i) for i in range(3))
    try:
        _register(coord, [server, t0, t1])
        for w in (server, t0, t1):
            w.send(protocol.READY, {"endpoints": {"ps": f"tcp://h:{w.wid}"}, "samples": w.wid})
        pump(coord, "started")
        assert ctl.calls[0] == ("start", {0: {"samples": 0}, 1: {"samples": 1}, 2: {"samples": 2}})
        assert [w.expect(protocol.START).meta["directive"] for w in (server, t0, t1)] == [
            {"batch": 8}, {"batch": 16}, {"batch": 24}
        ]  # fmt: skip
        server.send(protocol.EPOCH_END, {}, epoch=1)  # a server has no epochs: refused
        for t in (t0, t1):
            t.send(protocol.EPOCH_END, {"loss": 0.5}, epoch=1)
        pump(coord, "barrier")
        assert coord.traffic.dropped["bad_epoch_end"] == 1
        assert ctl.calls[1] == ("barrier", (1, [1, 2]))
        assert t0.expect(protocol.GO).meta["directive"] == {"ratio": 0.5}
        assert t1.expect(protocol.GO).meta["directive"] == {"ratio": 1 / 3}
        assert server.nothing(coord)
        for t in (t0, t1):  # the last epoch: its barrier is recorded, no go is sent
            t.send(protocol.EPOCH_END, {"loss": 0.4}, epoch=2)
            t.send(protocol.DONE, {})
        pump(coord, "draining")
        assert t0.expect(protocol.DRAIN).meta["directive"] == {"drain": 1}
        assert server.expect(protocol.DRAIN).meta["directive"] == {}  # servers drain too
        assert ("drain", [1, 2]) in ctl.calls
        coord.mark_failed(0, "was killed by SIGKILL")
        assert coord.fatal_failures == [0] and coord.failed_fraction == 0.0
    finally:
        for w in (server, t0, t1):
            w.close()
        coord.close()


def test_a_controller_halt_is_recorded(ctx: zmq.Context) -> None:
    coord, workers = started(ctx, n=2, controller=Recording(halt_at=1))
    try:
        for w in workers:
            w.send(protocol.EPOCH_END, {}, epoch=1)
        events = pump(coord, "halt")
        assert coord.halted == "two workers too slow"
        assert [e.data for e in events if e.kind == "halt"] == [
            {"reason": "two workers too slow", "at": "epoch 1"}
        ]
    finally:
        for w in workers:
            w.close()
        coord.close()


def test_without_barriers_no_epoch_state_is_kept(ctx: zmq.Context) -> None:
    policy = CoordinationPolicy(barriers=False)
    coord, workers = started(ctx, n=2, policy=policy)
    try:
        for epoch in range(1, 6):
            for w in workers:
                w.send(protocol.EPOCH_END, {}, epoch=epoch)
        pump(coord, "epoch", count=10)
        # review B12: with sync_epochs = false nothing accumulated per epoch
        assert coord._epoch_ends == {} and coord._barrier_since == {}
        assert all(w.nothing(coord) for w in workers)  # and no go was sent
    finally:
        for w in workers:
            w.close()
        coord.close()
