"""A Mercury device's network thread against a scripted peer on loopback: the owner averages
once every slice is in and answers every device; anything malformed or unknown is dropped and
counted, never trusted; a replica whose hash differs is named; swap chunks are answered
through the device's swap server and checked both ways."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from edgetrain.comm import channel, sockets
from edgetrain.comm.channel import Traffic
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Message
from edgetrain.errors import RunError
from edgetrain.ps.mercury import messages
from edgetrain.ps.mercury.codec import SampleCodec
from edgetrain.ps.mercury.net import Net
from edgetrain.ps.mercury.shards import bounds, device_weights
from tests.helpers.waiting import wait_until

RUN = "run-net"
P = 8  # device 0 owns [0, 4), device 1 [4, 8)


class Peer:
    """Device 1, played by the test: its ROUTER (device 0's DEALER connects) and its DEALER."""

    def __init__(self, zctx: zmq.SyncContext, device0: str) -> None:
        self.router = sockets.server(zctx, zmq.ROUTER, None)
        self.endpoint = channel.bind_random(self.router)
        self.dealer = sockets.client(zctx, zmq.DEALER, None, identity=b"w1")
        self.dealer.connect(device0)

    def send(self, kind: str, meta: dict, tensors: dict, sender: str = "w1") -> None:
        channel.send(self.dealer, Message(kind, sender, RUN, meta=meta, tensors=tensors))

    def recv(self, sock: zmq.SyncSocket, router: bool = False) -> Message:
        assert sock.poll(10_000, zmq.POLLIN), "no message from device 0"
        got = channel.recv(sock, RUN, None, router=router)
        assert got is not None
        return got[1]

    def close(self) -> None:
        self.router.close(0)
        self.dealer.close(0)


@pytest.fixture
def pair() -> Iterator[tuple[Net, Peer, Traffic]]:
    zctx = zmq.Context()
    router = sockets.server(zctx, zmq.ROUTER, None)
    endpoint = channel.bind_random(router)
    peer = Peer(zctx, endpoint)
    traffic = Traffic()
    raw = np.random.default_rng(0).integers(0, 256, size=(8, 1, 2, 2)).astype(np.float32)
    codec = SampleCodec.of(raw / 255.0, 10)
    answered: list[int] = []

    def serve(device: int, msg: Message):
        answered.append(device)
        n = len(msg.tensors["y"])
        tensors = codec.pack(raw[:n] / 255.0, np.arange(n), np.ones(n), np.zeros(n))
        return tensors, {"round": msg.meta["round"], "seq": msg.meta["seq"], "codec": codec.digest}

    net = Net(
        transport=Transport(zctx, RUN, 0, traffic), router=router, me=0, names={0: "w0", 1: "w1"},
        endpoints={0: endpoint, 1: peer.endpoint}, bounds=bounds(P, 2),
        weights=device_weights([1, 3]), timeout_s=5.0, codec=codec.digest,
        swap_check=lambda t: codec.check(t, 4), swap_server=serve,
    )  # fmt: skip
    net.codec_ = codec  # type: ignore[attr-defined]
    net.answered_ = answered  # type: ignore[attr-defined]
    net.start()
    try:
        yield net, peer, traffic
    finally:
        net.stop()
        peer.close()
        router.close(0)
        zctx.term()


def _g(values: list[float]) -> dict[str, np.ndarray]:
    return {"g": np.array(values, dtype=np.float32)}


@pytest.mark.timeout(60)
def test_the_owner_averages_and_answers_and_drops_what_it_cannot_trust(pair) -> None:
    net, peer, traffic = pair
    bad = [
        ({"iter": 0, "lo": 4, "hi": 8}, _g([1, 1, 1, 1]), "wrong_slice"),
        ({"iter": 0, "lo": 0, "hi": 4}, _g([1, np.nan, 1, 1]), "non_finite"),
        ({"iter": 0, "lo": 0, "hi": 4}, {"g": np.ones(4, np.float64)}, "bad_tensor_dtype"),
        ({"iter": -1, "lo": 0, "hi": 4}, _g([1, 1, 1, 1]), "bad_iter"),
        ({"iter": 5, "lo": 0, "hi": 4}, _g([1, 1, 1, 1]), "early_slice"),
    ]
    for meta, tensors, _ in bad:
        peer.send(messages.GRAD, meta, tensors)
    peer.send(messages.GRAD, {"iter": 0, "lo": 0, "hi": 4}, _g([1, 1, 1, 1]), sender="w7")
    wait_until(lambda: sum(traffic.dropped.values()) >= 6, 10, "six drops")
    assert {r for _, _, r in bad} <= set(traffic.dropped) and traffic.dropped["unknown_device"]
    # the real slice of device 1, then device 0's own push: the average goes back to device 1
    peer.send(messages.GRAD, {"iter": 0, "lo": 0, "hi": 4}, _g([4, 4, 4, 4]))
    net.push(0, np.arange(P, dtype=np.float32), None)
    avg = peer.recv(peer.dealer)
    assert avg.type == messages.AVG and avg.meta == {"iter": 0, "lo": 0, "hi": 4}
    # 0.25 * [0, 1, 2, 3] + 0.75 * 4
    assert avg.tensors["g"].tolist() == [3.0, 3.25, 3.5, 3.75]
    got = peer.recv(peer.router, router=True)  # device 0's slice of device 1's shard
    assert got.type == messages.GRAD and got.tensors["g"].tolist() == [4.0, 5.0, 6.0, 7.0]
    channel.send(
        peer.router,
        Message(messages.AVG, "w1", RUN, meta={"iter": 0, "lo": 4, "hi": 8}, tensors=_g([9] * 4)),
        identity=b"w0",
    )
    flat = net.wait_average(0)
    assert flat.tolist() == [3.0, 3.25, 3.5, 3.75, 9.0, 9.0, 9.0, 9.0]


@pytest.mark.timeout(60)
def test_device_0_names_a_replica_whose_hash_differs(pair) -> None:
    net, peer, _ = pair
    peer.send(messages.GRAD, {"iter": 0, "lo": 0, "hi": 4, "hash": "b" * 16}, _g([0] * 4))
    net.push(0, np.zeros(P, dtype=np.float32), "a" * 16)
    with pytest.raises(RunError, match="replicas diverged at iteration 0: device 1 holds"):
        net.wait_average(0)


@pytest.mark.timeout(60)
def test_swap_chunks_are_checked_and_answered(pair) -> None:
    net, peer, traffic = pair
    codec = net.codec_  # type: ignore[attr-defined]
    chunk = codec.pack(np.zeros((3, 1, 2, 2), np.float32), np.arange(3), np.ones(3), np.zeros(3))
    meta = {"round": 0, "seq": 0, "codec": codec.digest}
    peer.send(messages.SWAP, {**meta, "codec": "0" * 16}, chunk)  # another codec
    peer.send(messages.SWAP, meta, {**chunk, "y": np.array([0, 1, 99])})  # a label out of range
    wait_until(lambda: sum(traffic.dropped.values()) >= 2, 10, "two drops")
    assert traffic.dropped["wrong_codec"] == 1 and traffic.dropped["bad_swap_labels"] == 1
    assert net.answered_ == []  # type: ignore[attr-defined]
    peer.send(messages.SWAP, meta, chunk)
    answer = peer.recv(peer.dealer)
    assert answer.type == messages.SWAP_OK and len(answer.tensors["y"]) == 3
    assert net.answered_ == [1]  # type: ignore[attr-defined]
