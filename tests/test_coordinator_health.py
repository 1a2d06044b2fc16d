"""Coordinator health: heartbeats, failed workers, the watchdog's words, checkpoints, resume,
and a control plane that cannot lose a message."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from edgetrain.comm import protocol
from edgetrain.comm.channel import Traffic
from edgetrain.comm.client import CoordinatorClient
from edgetrain.comm.control import HandIn, assign_roles
from edgetrain.comm.coordinator import Coordinator, Resume
from edgetrain.gossip.drain import GossipController
from tests.helpers.fake_worker import RUN, FakeWorker, pump, started


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def test_silent_worker_fails_after_three_heartbeats_and_peers_are_told(ctx: zmq.Context) -> None:
    coord, (a, b, _c) = started(ctx, heartbeat_s=10.0)
    hb = FakeWorker(ctx, coord.endpoint, 0, identity=protocol.heartbeat_identity(0))
    before = coord.workers[0].last_seen
    hb.send(protocol.HEARTBEAT, {"ack": 2})
    for _ in range(250):
        if coord.poll(20) == [] and coord.workers[0].last_seen > before:
            break
    assert coord.workers[0].last_seen > before  # a heartbeat counts as a sign of life
    assert coord.control.unacknowledged(0) == []  # ... and acknowledges welcome and start
    now = time.monotonic()
    for i, silent_s in ((0, 1.0), (1, 29.0), (2, 30.5)):
        coord.workers[i].last_seen = now - silent_s
    events = coord.check_heartbeats(now)
    failed = [e for e in events if e.kind == "failed"]
    assert [e.worker for e in failed] == [2]  # more than 3 x 10 s without a word
    assert "stopped heartbeating" in failed[0].data["reason"]
    assert coord.failed == [2] and coord.failed_fraction == pytest.approx(1 / 3)
    assert a.expect(protocol.PEERS).meta["failed"] == [2]
    assert b.expect(protocol.PEERS).meta["failed"] == [2]
    assert coord.check_heartbeats(now) == []  # reported once
    hb.close()


def test_heartbeat_must_come_from_the_heartbeat_identity(ctx: zmq.Context) -> None:
    coord, (a, _b) = started(ctx, n=2)
    before = coord.workers[0].last_seen
    spoof = FakeWorker(ctx, coord.endpoint, 0, identity="w9.hb")
    spoof.send(protocol.HEARTBEAT)
    for _ in range(250):
        coord.poll(20)
        if coord.traffic.dropped["bad_sender"]:
            break
    assert coord.traffic.dropped["bad_sender"] == 1
    assert coord.workers[0].last_seen == before
    spoof.close()


def test_a_failure_releases_the_barrier_and_the_drain(ctx: zmq.Context) -> None:
    coord, (a, b, c) = started(ctx, controller=GossipController())
    a.send(protocol.EPOCH_END, {}, epoch=1)
    b.send(protocol.EPOCH_END, {}, epoch=1)
    pump(coord, "epoch", count=2)
    assert coord.waiting_on() == [2]
    stall = coord.stall(time.monotonic() + 40)
    assert stall is not None and stall[0] >= 40
    assert stall[1].startswith("waiting on worker 2 (host h2) to finish epoch 1 for 4")
    events = coord.mark_failed(2, "was killed by SIGKILL")
    assert [e.kind for e in events] == ["failed", "barrier"]
    for w in (a, b):
        assert w.expect(protocol.PEERS).meta["failed"] == [2]
        assert w.expect(protocol.GO).epoch == 2
    a.send(protocol.DONE, {"sent": {"1": 4, "2": 9}})
    b.send(protocol.DONE, {"sent": {"0": 5, "2": 1}})
    pump(coord, "draining")
    # messages to and from the failed worker are not expected
    assert a.expect(protocol.DRAIN).meta["directive"] == {"expect_from": {"1": 5}}
    assert b.expect(protocol.DRAIN).meta["directive"] == {"expect_from": {"0": 4}}
    assert coord.stall(time.monotonic())[1].startswith(  # type: ignore[index]
        "waiting on worker 0 (host h0), worker 1 (host h1) for their final weights"
    )
    for w in (a, b):
        w.send(protocol.FINAL, {"handin": {"alpha": 0.3}})
    pump(coord, "finished")
    assert sorted(coord.finals) == [0, 1] and coord.finals[0].meta == {"alpha": 0.3}


def test_a_failure_while_draining_sends_the_survivors_new_expectations(ctx: zmq.Context) -> None:
    """Review B10: the survivors must not wait the whole drain timeout for messages the failed
    worker counted as sent to them."""
    coord, (a, b, c) = started(ctx, controller=GossipController())
    for w, sent in ((a, {"1": 4, "2": 2}), (b, {"0": 5, "2": 1}), (c, {"0": 6, "1": 3})):
        w.send(protocol.DONE, {"sent": sent})
    pump(coord, "draining")
    assert a.expect(protocol.DRAIN).meta["directive"] == {"expect_from": {"1": 5, "2": 6}}
    assert b.expect(protocol.DRAIN).meta["directive"] == {"expect_from": {"0": 4, "2": 3}}
    c.send(protocol.FINAL, {"handin": {"alpha": 0.2}})
    pump(coord, "final")
    assert coord.mark_failed(2, "exited") == []  # it handed in: done with the run, not failed
    events = coord.mark_failed(1, "stopped heartbeating")
    assert [e.kind for e in events] == ["failed", "draining"] and events[1].data["again"]
    assert a.expect(protocol.PEERS).meta["failed"] == [1]
    # worker 2 handed in, so what it sent still counts; worker 1's does not
    assert a.expect(protocol.DRAIN).meta["directive"] == {"expect_from": {"2": 6}}


def test_training_starts_without_a_worker_that_failed_while_setting_up(ctx: zmq.Context) -> None:
    coord = Coordinator(RUN, {}, assign_roles(["trainer"] * 3), context=ctx)
    workers = [FakeWorker(ctx, coord.endpoint, i) for i in range(3)]
    for w in workers:
        w.send(protocol.REGISTER, {})
    pump(coord, "registered", count=3)
    for w in workers[:2]:
        w.send(protocol.READY, {"endpoints": {"gossip": f"tcp://127.0.0.1:{1000 + w.wid}"}})
    pump(coord, "ready", count=2)
    assert coord.phase == "registering"
    coord.mark_failed(2, "exited with code 1")
    assert coord.phase == "training"
    for w in workers[:2]:
        w.expect(protocol.WELCOME)
        assert w.expect(protocol.PEERS).meta["failed"] == [2]
        assert sorted(w.expect(protocol.START).meta["roster"]) == ["0", "1"]


def test_checkpoint_completes_when_every_alive_worker_sent_its_part(ctx: zmq.Context) -> None:
    coord, workers = started(ctx, n=2)

    def hand_in(w: FakeWorker, alpha: float) -> None:
        tensors = {"fc.weight": np.full((2, 3), float(w.wid), np.float32)}
        w.send(protocol.CHECKPOINT, {"handin": {"alpha": alpha}}, epoch=2, tensors=tensors)

    hand_in(workers[0], 0.25)
    workers[0].send(protocol.EPOCH_END, {"loss": 0.5}, epoch=2)
    events = pump(coord, "epoch")
    assert "checkpoint" not in [e.kind for e in events] and coord.checkpoints == {}
    hand_in(workers[1], 0.75)
    pump(coord, "checkpoint")
    parts = coord.checkpoints[2]
    assert {i: h.meta for i, h in parts.items()} == {0: {"alpha": 0.25}, 1: {"alpha": 0.75}}
    assert np.array_equal(parts[1].weights["fc.weight"], np.ones((2, 3), np.float32))
    workers[0].send(protocol.CHECKPOINT, {"handin": ["not", "an", "object"]}, epoch=4)
    for _ in range(100):
        coord.poll(20)
        if coord.traffic.dropped["bad_checkpoint"]:
            break
    assert coord.traffic.dropped["bad_checkpoint"] == 1  # framing is checked, content is not


def test_resume_welcome_carries_each_workers_hand_in(ctx: zmq.Context) -> None:
    handins = {i: HandIn({"w": np.full(3, float(i), np.float32)}, {"alpha": 0.5}) for i in range(2)}
    coord = Coordinator(
        RUN, {"x": 1}, assign_roles(["trainer"] * 2), context=ctx, resume=Resume(4, handins)
    )
    w = FakeWorker(ctx, coord.endpoint, 1)
    w.send(protocol.REGISTER, {})
    pump(coord, "registered")
    welcome = w.expect(protocol.WELCOME)
    assert welcome.meta["resume"] == {"epoch": 4, "handin": {"alpha": 0.5}}
    assert np.array_equal(welcome.tensors["w"], np.ones(3, np.float32))
    coord.close()
    # a worker with no part in the checkpoint still learns where the run resumes
    coord = Coordinator(
        RUN, {}, assign_roles(["trainer"] * 2), context=ctx, resume=Resume(4, {0: handins[0]})
    )
    w.close()
    w = FakeWorker(ctx, coord.endpoint, 1)
    w.send(protocol.REGISTER, {})
    pump(coord, "registered")
    welcome = w.expect(protocol.WELCOME)
    assert welcome.meta["resume"] == {"epoch": 4, "handin": None} and welcome.tensors == {}
    w.close()
    coord.close()


def test_unacknowledged_control_messages_are_resent(ctx: zmq.Context) -> None:
    coord, (a, b) = started(ctx, n=2, heartbeat_s=0.1)
    hb = FakeWorker(ctx, coord.endpoint, 0, identity=protocol.heartbeat_identity(0))
    hb.send(protocol.HEARTBEAT, {"ack": 2})  # worker 0 got welcome and start
    for _ in range(250):  # (the heartbeat comes on a socket of its own: no order with others)
        coord.poll(20)
        if not coord.control.unacknowledged(0):
            break
    for w in (a, b):
        w.send(protocol.EPOCH_END, {}, epoch=1)
    pump(coord, "barrier")
    assert a.expect(protocol.GO).meta["seq"] == 3
    assert coord.control.unacknowledged(0) == [3]
    coord.resend_stale(time.monotonic() + 0.31)  # 3 heartbeat intervals later: sent again
    assert coord.control.resent == 4  # worker 0: its go; worker 1 acknowledged nothing: all 3
    again = a.sock.poll(2000) and a.sock.recv_multipart()
    assert again and b'"seq":3' in again[0]
    hb.send(protocol.HEARTBEAT, {"ack": 3})
    for _ in range(100):
        coord.poll(20)
        if not coord.control.unacknowledged(0):
            break
    assert coord.control.unacknowledged(0) == []
    hb.close()


def test_a_lost_go_reaches_a_worker_that_asks_for_it(ctx: zmq.Context) -> None:
    """Review B3: a ``go`` sent while a worker's connection was down used to be dropped and the
    worker waited an hour, its heartbeats keeping it alive. Now it asks (``sync``) after three
    quiet heartbeat intervals and gets it."""
    coord = Coordinator(RUN, {}, assign_roles(["trainer"] * 2), context=ctx, heartbeat_s=0.2)
    clients = [
        CoordinatorClient(ctx, coord.endpoint, i, RUN, Traffic(), heartbeat_s=0.2) for i in range(2)
    ]
    stop = threading.Event()
    done: list[int] = []
    waiter: threading.Thread | None = None

    def serve() -> None:
        while not stop.is_set():
            coord.poll(20)

    try:
        for c in clients:
            c.send(protocol.REGISTER, {"host": "h"})
        pump(coord, "registered", count=2)
        for c in clients:
            c.wait_for(protocol.WELCOME, 5, sync=False)
            c.send(protocol.READY, {"endpoints": {}})
        pump(coord, "started")
        for c in clients:
            c.wait_for(protocol.START, 5)
            c.start_heartbeat(0.2)  # acknowledges welcome and start, keeps the worker alive
        # worker 1's connection is replaced just as the barrier is released: the go goes down
        # with the old connection (what a TCP reset does to messages in flight)
        clients[1].sock.close(linger=0)
        clients[0].send(protocol.EPOCH_END, {}, epoch=1)
        pump(coord, "epoch")
        doomed = FakeWorker(ctx, coord.endpoint, 1)
        doomed.send(protocol.EPOCH_END, {}, epoch=1)
        pump(coord, "barrier")
        doomed.close()  # go #3 for worker 1 is lost with it
        assert coord.control.unacknowledged(1) == [3]
        coord.control.resend_after_s = 3600.0  # only the worker's own request may bring it back
        clients[1].sock = clients[1]._make_socket(protocol.worker_name(1))  # reconnects
        waiter = threading.Thread(target=serve, daemon=True)
        waiter.start()
        t0 = time.monotonic()
        go = clients[1].wait_for(protocol.GO, 30)
        done.append(1)
        assert go.epoch == 2 and go.meta["seq"] == 3
        assert clients[1].syncs >= 1 and time.monotonic() - t0 < 10
    finally:
        stop.set()
        if waiter is not None:
            waiter.join(timeout=5)
        for c in clients:
            c.close()
        coord.close()
    assert done == [1]
