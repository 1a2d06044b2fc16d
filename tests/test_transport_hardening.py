"""Hardened transport: per-peer drop counters, send timeouts, size limits, reconnection."""

from __future__ import annotations

import json
import platform
import socket
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from edgetrain.comm import channel, sockets
from edgetrain.comm.channel import MAX_TRACKED_PEERS, Traffic
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import MAX_FRAME_BYTES, Message, encode
from edgetrain.gossip.node import GOSSIP, PEER_TYPES, GossipNode
from tests.helpers.skips import skip_or_fail

RUN = "run-h"


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


def _gossip(sender: str = "w1", run: str = RUN, **tensors: np.ndarray) -> Message:
    return Message(GOSSIP, sender, run, 1, 1, {"alpha": 0.5}, dict(tensors))


def _recv(sock: zmq.Socket, traffic: Traffic, timeout_ms: int = 5000) -> Message | None:
    assert sock.poll(timeout_ms), "nothing arrived"
    got = channel.recv(sock, RUN, PEER_TYPES, traffic)
    return None if got is None else got[1]


def _pair(ctx: zmq.Context) -> tuple[zmq.Socket, zmq.Socket]:
    pull = sockets.server(ctx, zmq.PULL)
    endpoint = channel.bind_random(pull)
    push = sockets.client(ctx, zmq.PUSH)
    push.connect(endpoint)
    return pull, push


def test_drops_are_counted_per_claimed_sender_and_reason(ctx: zmq.Context) -> None:
    pull, push = _pair(ctx)
    traffic = Traffic()
    channel.send(push, _gossip("w5", run="another-run"))
    push.send_multipart([b"\x00garbage"])
    bad = encode(_gossip("w6", x=np.zeros(4, np.float32)))
    head = json.loads(bytes(bad[0]))
    head["tensors"][0]["dtype"] = "object"
    push.send_multipart([json.dumps(head).encode(), bytes(bad[1])])
    channel.send(push, _gossip("w1", x=np.ones(3, np.float32)))
    got = [_recv(pull, traffic) for _ in range(4)]
    assert [m is None for m in got] == [True, True, True, False]
    assert traffic.dropped == {"wrong_run": 1, "bad_json": 1, "bad_dtype": 1}
    by_peer = traffic.as_dict()["dropped_by_peer"]
    assert by_peer == {"w5": {"wrong_run": 1}, "unknown": {"bad_json": 1}, "w6": {"bad_dtype": 1}}
    assert traffic.messages_received == 1


def test_per_peer_counters_are_bounded() -> None:
    traffic = Traffic()
    for i in range(MAX_TRACKED_PEERS + 50):
        traffic.drop("wrong_run", f"w{i}\x1b[2J")
    assert len(traffic.dropped_by_peer) == MAX_TRACKED_PEERS + 1
    assert traffic.dropped_by_peer["other"]["wrong_run"] == 50
    assert "w0[2J" in traffic.dropped_by_peer  # control characters are stripped
    assert traffic.dropped["wrong_run"] == MAX_TRACKED_PEERS + 50


def test_send_to_a_missing_peer_times_out_and_is_counted(ctx: zmq.Context) -> None:
    opts = sockets.SocketOptions(send_timeout_ms=50, send_hwm=1)
    push = sockets.client(ctx, zmq.PUSH, opts=opts)
    push.bind("tcp://127.0.0.1:*")  # nobody will ever connect: no pipe, so send must wait
    traffic = Traffic()
    with pytest.raises(zmq.Again):
        channel.send(push, _gossip(), traffic, peer="w2")  # w1 sends to w2
    assert traffic.dropped["send_timeout"] == 1
    # a send-side drop counts under the destination, not the sender itself (review B8)
    assert traffic.dropped_by_peer == {"w2": {"send_timeout": 1}}


def test_gossip_send_to_a_dead_peer_returns_false_once_its_queue_is_full(
    ctx: zmq.Context,
) -> None:
    node = GossipNode(Transport(ctx, RUN, 0, Traffic()), send_hwm=2)
    # The peer is gone but its endpoint stays in our peer list. A plain socket that is
    # bound and never listens holds the port, so every connect is refused. (Closing a
    # zmq listener instead races: zmq closes it later, on its I/O thread, and a connect
    # that lands first drains our queue into the dying socket; CI saw that once.)
    dead = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    dead.bind(("127.0.0.1", 0))
    endpoint = f"tcp://127.0.0.1:{dead.getsockname()[1]}"
    try:
        node.connect({1: endpoint})
        results = [node.send(1, _gossip("w0")) for _ in range(50)]
        assert results[0] and not results[-1]
        assert node.traffic.dropped["send_queue_full"] == results.count(False)
    finally:
        node.close()
        dead.close()


def test_a_restarted_peer_on_the_same_endpoint_receives_again(ctx: zmq.Context) -> None:
    sender = GossipNode(Transport(ctx, RUN, 0, Traffic()))
    peer_ctx = zmq.Context()  # the peer "process": destroying it closes its listener at once
    inbox = sockets.server(peer_ctx, zmq.PULL)
    endpoint = channel.bind_random(inbox)
    traffic = Traffic()
    try:
        sender.connect({1: endpoint})
        assert sender.send(1, _gossip("w0", x=np.full(3, 1.0, np.float32)))
        first = _recv(inbox, traffic)
        assert first is not None and float(first.tensors["x"][0]) == 1.0
        peer_ctx.destroy(linger=0)  # the peer stops ...
        peer_ctx = zmq.Context()
        inbox = sockets.server(peer_ctx, zmq.PULL)
        inbox.bind(endpoint)  # ... and restarts on the same port
        assert sender.send(1, _gossip("w0", x=np.full(3, 2.0, np.float32)))
        second = _recv(inbox, traffic, timeout_ms=10_000)
        assert second is not None and float(second.tensors["x"][0]) == 2.0
    finally:
        sender.close()
        peer_ctx.destroy(linger=0)


def test_an_oversized_frame_never_arrives_and_the_socket_keeps_working(
    ctx: zmq.Context,
) -> None:
    opts = sockets.SocketOptions(max_frame_bytes=64 * 1024)
    pull = sockets.server(ctx, zmq.PULL, opts=opts)
    endpoint = channel.bind_random(pull)
    hostile = sockets.client(ctx, zmq.PUSH)
    hostile.connect(endpoint)
    hostile.send_multipart([b"{}", b"\x00" * (1024 * 1024)])  # peer gets disconnected
    honest = sockets.client(ctx, zmq.PUSH)
    honest.connect(endpoint)
    channel.send(honest, _gossip("w1", x=np.arange(4, dtype=np.float32)))
    traffic = Traffic()
    got = _recv(pull, traffic)
    assert got is not None and got.sender == "w1"
    assert not pull.poll(200)  # the oversized message was never delivered
    assert traffic.bytes_received < 64 * 1024


def test_tensors_over_16_mib_cross_a_socket_in_several_frames(ctx: zmq.Context) -> None:
    pull, push = _pair(ctx)
    big = np.random.default_rng(0).standard_normal((MAX_FRAME_BYTES * 2 + 4096) // 4)
    big = big.astype(np.float32)
    sent = channel.send(push, _gossip("w1", big=big, small=np.arange(5)))
    traffic = Traffic()
    got = _recv(pull, traffic, timeout_ms=20_000)
    assert got is not None
    np.testing.assert_array_equal(got.tensors["big"], big)
    np.testing.assert_array_equal(got.tensors["small"], np.arange(5))
    assert traffic.bytes_received == sent and traffic.dropped == {}


def test_receivers_keep_freed_buffers_where_glibc_allows() -> None:
    if platform.libc_ver()[0] != "glibc":
        skip_or_fail("mallopt tuning is glibc-only")
    assert sockets.keep_freed_buffers()  # every mallopt call was accepted


def test_freed_buffers_are_kept_only_when_the_recipe_asks(
    ctx: zmq.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the heap tuning keeps up to 1 GiB of freed memory with the process: opt-in ([gossip]
    # keep_buffers), since a 2-4 GiB edge device may not afford it
    calls: list[bool] = []
    monkeypatch.setattr(sockets, "keep_freed_buffers", lambda: calls.append(True) or True)
    node = GossipNode(Transport(ctx, RUN, 0, Traffic()))
    node.close()
    assert calls == []
    node = GossipNode(Transport(ctx, RUN, 1, Traffic()), keep_buffers=True)
    node.close()
    assert calls == [True]
