"""Coordinator health: heartbeats, failed workers, the watchdog's words, checkpoints, resume."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from edgetrain.comm import channel, protocol
from edgetrain.comm.coordinator import Coordinator, FinalState, Resume
from edgetrain.comm.wire import Message
from tests.test_coordinator import RUN, FakeWorker, pump


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def _training(ctx: zmq.Context, n: int = 3, **kw: object) -> tuple[Coordinator, list[FakeWorker]]:
    """A coordinator with ``n`` fake workers registered, ready and started."""
    coord = Coordinator(RUN, {}, n, sync_epochs=True, context=ctx, **kw)  # type: ignore[arg-type]
    workers = [FakeWorker(ctx, coord.endpoint, i) for i in range(n)]
    for w in workers:
        w.send(
            protocol.REGISTER, {"endpoint": f"tcp://127.0.0.1:{1000 + w.wid}", "host": f"h{w.wid}"}
        )
    pump(coord, "registered", count=n)
    for w in workers:
        w.expect(protocol.WELCOME)
        w.send(protocol.READY)
    pump(coord, "started")
    for w in workers:
        w.expect(protocol.START)
    return coord, workers


def test_silent_worker_fails_after_three_heartbeats_and_peers_are_told(ctx: zmq.Context) -> None:
    coord, (a, b, _c) = _training(ctx, heartbeat_s=10.0)
    hb = FakeWorker(ctx, coord.endpoint, 0, identity=protocol.heartbeat_identity(0))
    before = coord.workers[0].last_seen
    hb.send(protocol.HEARTBEAT)
    for _ in range(250):
        if coord.poll(20) == [] and coord.workers[0].last_seen > before:
            break
    assert coord.workers[0].last_seen > before  # a heartbeat counts as a sign of life
    now = time.monotonic()
    for i, silent_s in ((0, 1.0), (1, 29.0), (2, 30.5)):
        coord.workers[i].last_seen = now - silent_s
    events = coord.check_heartbeats(now)
    failed = [e for e in events if e.kind == "failed"]
    assert [e.worker for e in failed] == [2]  # more than 3 x 10 s without a word
    assert "stopped heartbeating" in failed[0].data["reason"]
    assert coord.failed == [2] and coord.failed_fraction == pytest.approx(1 / 3)
    assert a.expect(protocol.PEERS).meta == {"failed": [2]}
    assert b.expect(protocol.PEERS).meta == {"failed": [2]}
    assert coord.check_heartbeats(now) == []  # reported once
    hb.sock.close()


def test_heartbeat_must_come_from_the_heartbeat_identity(ctx: zmq.Context) -> None:
    coord, (a, _b) = _training(ctx, n=2)
    before = coord.workers[0].last_seen
    spoof = FakeWorker(ctx, coord.endpoint, 0, identity="w9.hb")
    spoof.send(protocol.HEARTBEAT)
    for _ in range(250):
        coord.poll(20)
        if coord.traffic.dropped["bad_sender"]:
            break
    assert coord.traffic.dropped["bad_sender"] == 1
    assert coord.workers[0].last_seen == before
    spoof.sock.close()


def test_a_failure_releases_the_barrier_and_the_drain(ctx: zmq.Context) -> None:
    coord, (a, b, c) = _training(ctx)
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
        assert w.expect(protocol.PEERS).meta == {"failed": [2]}
        assert w.expect(protocol.GO).epoch == 2
    a.send(protocol.DONE, {"sent": {"1": 4, "2": 9}})
    b.send(protocol.DONE, {"sent": {"0": 5, "2": 1}})
    pump(coord, "draining")
    # messages to and from the failed worker are not expected
    assert a.expect(protocol.DRAIN).meta == {"expect": 5, "expect_from": {"1": 5}}
    assert b.expect(protocol.DRAIN).meta == {"expect": 4, "expect_from": {"0": 4}}
    assert coord.stall(time.monotonic())[1].startswith(  # type: ignore[index]
        "waiting on worker 0 (host h0), worker 1 (host h1) for their final weights"
    )
    for w in (a, b):
        w.send(protocol.FINAL, {"alpha": 0.3})
    pump(coord, "finished")
    assert sorted(coord.finals) == [0, 1]


def test_training_starts_without_a_worker_that_failed_while_setting_up(ctx: zmq.Context) -> None:
    coord = Coordinator(RUN, {}, 3, context=ctx)
    workers = [FakeWorker(ctx, coord.endpoint, i) for i in range(3)]
    for w in workers:
        w.send(protocol.REGISTER, {"endpoint": f"tcp://127.0.0.1:{1000 + w.wid}"})
    pump(coord, "registered", count=3)
    for w in workers[:2]:
        w.send(protocol.READY)
    pump(coord, "ready", count=2)
    assert coord.phase == "registering"
    coord.mark_failed(2, "exited with code 1")
    assert coord.phase == "training"
    for w in workers[:2]:
        w.expect(protocol.WELCOME)
        assert w.expect(protocol.PEERS).meta == {"failed": [2]}
        assert w.expect(protocol.START).meta["peers"] == {
            "0": "tcp://127.0.0.1:1000",
            "1": "tcp://127.0.0.1:1001",
        }


def test_checkpoint_completes_when_every_alive_worker_sent_its_state(ctx: zmq.Context) -> None:
    coord, workers = _training(ctx, n=2)

    def end_epoch(w: FakeWorker, alpha: float) -> None:
        msg = Message(
            protocol.EPOCH_END,
            protocol.worker_name(w.wid),
            RUN,
            epoch=2,
            meta={"loss": 0.5, "checkpoint": {"alpha": alpha}},
            tensors={"fc.weight": np.full((2, 3), float(w.wid), np.float32)},
        )
        channel.send(w.sock, msg)

    end_epoch(workers[0], 0.25)
    events = pump(coord, "epoch")
    assert "checkpoint" not in events[-1].data and coord.checkpoints == {}
    end_epoch(workers[1], 0.75)
    pump(coord, "checkpoint")
    states = coord.checkpoints[2]
    assert {i: s.alpha for i, s in states.items()} == {0: 0.25, 1: 0.75}
    assert np.array_equal(states[1].weights["fc.weight"], np.ones((2, 3), np.float32))


def test_resume_welcome_carries_each_workers_state(ctx: zmq.Context) -> None:
    states = {i: FinalState(0.5, {"w": np.full(3, float(i), np.float32)}, {}) for i in range(2)}
    coord = Coordinator(RUN, {"x": 1}, 2, context=ctx, resume=Resume(4, states))
    w = FakeWorker(ctx, coord.endpoint, 1)
    w.send(protocol.REGISTER, {"endpoint": "tcp://127.0.0.1:1"})
    pump(coord, "registered")
    welcome = w.expect(protocol.WELCOME)
    assert welcome.meta["resume"] == {"epoch": 4, "alpha": 0.5}
    assert np.array_equal(welcome.tensors["w"], np.ones(3, np.float32))
