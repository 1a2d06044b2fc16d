"""A worker sending a hand-in over a slow link is not lost: it announces the bulk send in a
heartbeat before the bytes, the coordinator excuses its silence for the send's time at
:data:`~edgetrain.comm.activity.MIN_LINK_BPS`, and the worker's own wait does not give up on a
coordinator whose answers queue behind those bytes (pure parts against literal values; the
heartbeat thread and both ends over real sockets)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from edgetrain.comm import activity, channel, protocol, wire
from edgetrain.comm.channel import Traffic
from edgetrain.comm.client import BULK_BYTES, CoordinatorClient, Heartbeat
from edgetrain.comm.coordinator import bulk_until
from edgetrain.errors import RunError
from tests.helpers.fake_worker import RUN, FakeWorker, started


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)
    activity.set_phase("setup")


def test_transfer_time_and_the_silence_it_excuses() -> None:
    assert activity.MIN_LINK_BPS == 1_000_000
    assert activity.transfer_s(23_000_000) == pytest.approx(184.0)  # a stage of 23 MB at 1 Mbit/s
    doing = {"phase": "handing in", "sending": 1_000_000, "sending_for_s": 2.0}
    assert bulk_until(100.0, doing) == pytest.approx(98.0 + 8.0)  # began 2 s before it was heard
    assert bulk_until(100.0, {"phase": "training"}) is None
    assert bulk_until(100.0, None) is None
    assert bulk_until(100.0, doing, arrived=97.0) == pytest.approx(106.0)  # a later send
    assert bulk_until(100.0, doing, arrived=98.5) is None  # a late heartbeat of a send that came


def test_the_announcement_in_the_record_and_from_the_network() -> None:
    activity.set_phase("handing in")
    activity.sending(5_000_000)
    got = activity.snapshot(now=time.monotonic() + 1.5)
    assert got["sending"] == 5_000_000 and got["sending_for_s"] >= 1.5
    assert activity.parse(got) == {**got, "sending_for_s": float(got["sending_for_s"])}
    activity.set_phase("setup")  # a new phase ends the announcement
    assert activity.snapshot() == {"phase": "setup"}
    for nbytes, for_s in ((-1, 1), (True, 1), (1.5, 1), ("9", 1), (10**13, 1), (10, -1),
                          (10, float("nan")), (10, 1e9), (10, None)):  # fmt: skip
        record = {"phase": "t", "sending": nbytes, "sending_for_s": for_s}
        assert activity.parse(record) == {"phase": "t"}, record


def test_beat_now_sends_the_announcement_at_once(ctx: zmq.Context) -> None:
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    sock = ctx.socket(zmq.DEALER)
    sock.connect(f"tcp://127.0.0.1:{port}")
    beat = Heartbeat(sock, protocol.worker_name(0), RUN, interval_s=60.0)
    beat.start()
    try:
        assert router.poll(5000)
        first = channel.recv(router, RUN, router=True)
        assert first is not None and "sending" not in first[1].meta["doing"]
        activity.sending(BULK_BYTES + 1)
        assert beat.beat_now(timeout_s=5.0)  # not the interval's 60 s
        assert router.poll(5000)
        second = channel.recv(router, RUN, router=True)
        assert second is not None and second[1].meta["doing"]["sending"] == BULK_BYTES + 1
    finally:
        beat.stop()
        router.close(linger=0)
    assert not beat.is_alive()


def test_an_announced_hand_in_excuses_silence_until_it_arrives(ctx: zmq.Context) -> None:
    coord, (a, _b) = started(ctx, n=2, heartbeat_s=1.0)
    hb = FakeWorker(ctx, coord.endpoint, 0, identity=protocol.heartbeat_identity(0))
    hb.send(protocol.HEARTBEAT, {"ack": 0, "doing": {"phase": "handing in", "sending": 2_000_000,
                                                     "sending_for_s": 0.5}})  # fmt: skip
    for _ in range(250):
        coord.poll(20)
        if coord.workers[0].bulk_until:
            break
    heard = coord.workers[0].last_seen
    assert coord.workers[0].bulk_until == pytest.approx(heard - 0.5 + 16.0)
    coord.workers[1].last_seen = heard + 17.0  # worker 1 heard of, worker 0 not, 18 s later
    assert coord.check_heartbeats(heard + 18.0) == []  # 2 MB: 16 s at 1 Mbit/s, + 3 s
    coord.workers[1].last_seen = heard + 19.0
    failed = [e.worker for e in coord.check_heartbeats(heard + 19.2) if e.kind == "failed"]
    assert failed == [0]  # past it: lost, though its hand-in never came
    hb.close()
    coord, (a, _b) = started(ctx, n=2, heartbeat_s=1.0)  # again, and the hand-in comes
    coord.workers[0].bulk_until = time.monotonic() + 60.0
    a.send(protocol.CHECKPOINT, {"handin": {}}, epoch=1, tensors={"w": np.zeros(4, np.float32)})
    for _ in range(250):
        coord.poll(20)
        if coord.workers[0].bulk_arrived:
            break
    assert coord.workers[0].bulk_until == 0.0  # here: silence counts as usual again
    now = coord.workers[0].last_seen + 3.5
    coord.workers[1].last_seen = now
    failed = [e.worker for e in coord.check_heartbeats(now) if e.kind == "failed"]
    assert failed == [0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bulk", [False, True])
def test_a_worker_behind_its_own_bulk_send_does_not_give_up(ctx: zmq.Context, bulk: bool) -> None:
    """A coordinator that answers nothing: a worker waiting after a small send gives up after
    five sync intervals; one whose bulk send may still be on the link waits for it."""
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    client = CoordinatorClient(ctx, f"tcp://127.0.0.1:{port}", 0, RUN, Traffic(), heartbeat_s=0.1)
    try:
        size = BULK_BYTES + 1 if bulk else 8  # float32s: 4 x BULK_BYTES, 8.4 s at 1 Mbit/s
        client.send(protocol.FINAL, {"handin": {}}, tensors={"w": np.zeros(size, np.float32)})
        with pytest.raises(RunError) as failed:
            client.wait_for(protocol.STOP, 3.0)
        expected = "no 'stop' from the coordinator in 3 s" if bulk else "has not answered for"
        assert expected in str(failed.value)
    finally:
        client.close()
        router.close(linger=0)


def test_the_coordinator_announces_a_bulk_message_ahead_of_it(ctx: zmq.Context) -> None:
    """The other direction (a rewind's or a resumed welcome's weights): a ``state`` with the
    bytes goes first, so the worker's wait allows them their time."""
    coord, (a, _b) = started(ctx, n=2)
    for tensors, announced in (({"w": np.zeros(8, np.float32)}, False),
                               ({"w": np.zeros(BULK_BYTES, np.float32)}, True)):  # fmt: skip
        coord._transmit(0, wire.Message(protocol.PEERS, protocol.COORDINATOR, coord.run_id,
                                   meta={"seq": 99}, tensors=tensors))  # fmt: skip
        got = []
        while a.sock.poll(2000 if not got else 200):
            msg = channel.recv(a.sock, RUN)
            assert msg is not None
            got.append(msg[1])
        kinds = [m.type for m in got]
        assert kinds == ([protocol.STATE, protocol.PEERS] if announced else [protocol.PEERS])
        if announced:
            assert got[0].meta["incoming"] == 4 * BULK_BYTES


@pytest.mark.timeout(60)
def test_a_worker_waits_for_an_announced_message_from_the_coordinator(ctx: zmq.Context) -> None:
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    client = CoordinatorClient(ctx, f"tcp://127.0.0.1:{port}", 0, RUN, Traffic(), heartbeat_s=0.1)
    try:
        client.send(protocol.SYNC, {"have": 0})
        assert router.poll(5000)
        identity = router.recv_multipart()[0]
        state = wire.Message(protocol.STATE, protocol.COORDINATOR, RUN, meta={"incoming": 10**6})
        channel.send(router, state, identity=identity)
        with pytest.raises(RunError) as failed:  # 8 s allowed for 1 MB: the wait's own timeout
            client.wait_for(protocol.STOP, 3.0)
        assert "no 'stop' from the coordinator in 3 s" in str(failed.value)
    finally:
        client.close()
        router.close(linger=0)
