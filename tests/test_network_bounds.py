"""Network input a run did not ask for: an oversize message is refused by ZeroMQ before it is
buffered, and a worker's identity without the run's secret gets nothing (issue 31, item 4)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import zmq
from zmq.utils.monitor import recv_monitor_message

from edgetrain.comm import channel, protocol
from edgetrain.comm.channel import Traffic
from edgetrain.comm.client import CoordinatorClient
from edgetrain.comm.control import assign_roles
from edgetrain.comm.coordinator import Coordinator
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import MAX_FRAME_BYTES, Limits, Message, WireError, decode, encode
from edgetrain.gossip.node import GossipNode
from edgetrain.runtime.limits import model_limits
from tests.helpers.fake_worker import pump

RUN = "run-bounds"
SECRET = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    c = zmq.Context()
    yield c
    c.term()


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _small_model_limits() -> Limits:
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    return model_limits(model, torch.zeros(1, 64), batch_size=32)


def _wait_event(monitor: zmq.Socket, event: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        wait_ms = int(max(1, (deadline - time.monotonic()) * 1000))
        if monitor.poll(wait_ms) and recv_monitor_message(monitor)["event"] == event:
            return True
    return False


def test_a_small_models_limits_are_far_below_a_16_mib_frame() -> None:
    limits = _small_model_limits()
    assert limits.frame_bytes < MAX_FRAME_BYTES // 2
    assert limits.tensors < 100


def test_oversize_message_to_a_gossip_inbox_is_refused_before_it_is_buffered(
    ctx: zmq.Context,
) -> None:
    """The review's attack, scaled down: 8 frames of 16 MiB to a worker's gossip inbox. Without
    the run's limits ZeroMQ buffers all 128 MiB before any check; with them the sender is
    disconnected at the first frame and nothing is stored."""
    node = GossipNode(Transport(ctx, RUN, 1, Traffic(), limits=_small_model_limits()))
    monitor = node.inbox.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    attacker = ctx.socket(zmq.PUSH)
    attacker.setsockopt(zmq.LINGER, 0)
    try:
        before = _rss_mib()
        attacker.connect(node.endpoint)
        chunk = np.zeros(MAX_FRAME_BYTES, dtype=np.uint8)
        attacker.send_multipart([b"{}", *([chunk] * 8)], copy=False)
        assert _wait_event(monitor, zmq.EVENT_DISCONNECTED, 20.0), "the sender was not refused"
        assert node.inbox.poll(0) == 0  # nothing reached the inbox
        assert _rss_mib() - before < 64  # the 128 MiB were never buffered
    finally:
        attacker.close(0)
        node.inbox.disable_monitor()
        monitor.close(0)
        node.close()


def test_a_model_sized_message_still_arrives_within_the_limits(ctx: zmq.Context) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    limits = model_limits(model, torch.zeros(1, 64), batch_size=32)
    receiver = GossipNode(Transport(ctx, RUN, 1, Traffic(), limits=limits))
    sender = GossipNode(Transport(ctx, RUN, 2, Traffic(), limits=limits))
    try:
        receiver.connect({2: sender.endpoint})
        sender.connect({1: receiver.endpoint})
        state = {k: v.numpy().copy() for k, v in model.state_dict().items()}
        assert sender.wait_room(1, 10_000)
        assert sender.send(1, sender.transport.message("gossip", {"alpha": 0.5}, state))
        assert receiver.inbox.poll(10_000)
        got = receiver.receive_all()
        assert len(got) == 1 and set(got[0].tensors) == set(state)
    finally:
        sender.close()
        receiver.close()


def test_a_message_of_more_frames_than_the_limits_allow_is_dropped_unread() -> None:
    limits = Limits(message_bytes=1024, tensors=2)
    frames = encode(Message("gossip", "w2", RUN, tensors={"x": np.ones(4, np.float32)}))
    assert decode(frames, RUN, limits=limits).tensors["x"].shape == (4,)
    with pytest.raises(WireError) as err:
        decode([frames[0], *([b""] * limits.frames)], RUN, limits=limits)
    assert err.value.reason == "too_many_frames"
    many = {f"t{i}": np.ones(1, np.float32) for i in range(3)}
    with pytest.raises(WireError) as err:
        decode(encode(Message("gossip", "w2", RUN, tensors=many)), RUN, limits=limits)
    assert err.value.reason in ("too_many_frames", "too_many_tensors")


def test_a_workers_identity_without_the_run_secret_gets_nothing(
    ctx: zmq.Context, caplog: pytest.LogCaptureFixture
) -> None:
    """The review's hijack: a DEALER with identity ``w0`` (and the run id) connects while worker
    0 registers and starts. Without the secret it must receive none of worker 0's directives,
    and its forged messages (register, error) must change nothing."""
    caplog.set_level(logging.WARNING, logger="edgetrain.comm.coordinator")
    coord = Coordinator(RUN, {}, assign_roles(["trainer"]), context=ctx, secret=SECRET)
    client = CoordinatorClient(ctx, coord.endpoint, 0, RUN, Traffic(), secret=SECRET)
    hijackers = []
    try:
        for identity in (b"w0", b"w0.hb"):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.IDENTITY, identity)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(coord.endpoint)
            hijackers.append(sock)
        forged = Message(protocol.REGISTER, "w0", RUN, meta={"host": "evil"})
        channel.send(hijackers[0], forged)
        client.send(protocol.REGISTER, {"host": "good", "pid": 1})
        events = pump(coord, "registered")
        assert [e.data["host"] for e in events if e.kind == "registered"] == ["good"]
        client.wait_for(protocol.WELCOME, 10.0, sync=False)
        # a forged error with the run id, from the stolen identity: must not fail worker 0
        channel.send(hijackers[0], Message(protocol.ERROR, "w0", RUN, meta={"message": "x"}))
        deadline = time.monotonic() + 10
        while coord.traffic.dropped["bad_auth"] < 2 and time.monotonic() < deadline:
            coord.poll(20)
        assert coord.traffic.dropped["bad_auth"] == 2
        client.send(protocol.READY, {"endpoints": {"gossip": "tcp://127.0.0.1:1"}})
        pump(coord, "started")
        client.wait_for(protocol.START, 10.0)
        assert coord.failed == []
        coord.poll(0)
        assert not any(s.poll(100) for s in hijackers), "a hijacker received a directive"
        assert "without the run's secret" in caplog.text
    finally:
        for s in hijackers:
            s.close(0)
        client.close()
        coord.close()


def test_messages_carry_a_token_not_the_secret() -> None:
    token = protocol.auth_token(SECRET, RUN, 0)
    assert SECRET not in token and token != protocol.auth_token(SECRET, RUN, 1)
    assert token != protocol.auth_token(SECRET, "other-run", 0)
    assert protocol.identity_of(b"w0.0123abcd", 0, heartbeat=False)
    assert not protocol.identity_of(b"w0.hb.0123", 0, heartbeat=False)
    assert protocol.identity_of(b"w0.hb.0123", 0, heartbeat=True)
    assert not protocol.identity_of(b"w01", 0, heartbeat=False)
