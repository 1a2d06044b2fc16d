"""Gossip sends a snapshot: weights updated right after a send do not leak into the message."""

from __future__ import annotations

import numpy as np
import torch
import zmq

from edgetrain.comm import channel
from edgetrain.comm.channel import Traffic
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Message, arrays_from_state
from edgetrain.gossip.node import GOSSIP, GossipNode


def test_sent_weights_are_a_snapshot_and_counted() -> None:
    ctx = zmq.Context()
    a = GossipNode(Transport(ctx, "run", 0, Traffic()))
    b = GossipNode(Transport(ctx, "run", 1, Traffic()))
    try:
        a.connect({0: a.endpoint, 1: b.endpoint})
        b.connect({0: a.endpoint, 1: b.endpoint})
        weights = {"w": torch.zeros(512, 512)}  # 1 MiB: sent zero-copy
        msg = Message(GOSSIP, a.name, "run", 1, 1, {"alpha": 0.5}, arrays_from_state(weights))
        assert a.send(1, msg)
        weights["w"].add_(1.0)  # training goes on in place right after the send
        got: list[Message] = []
        while not got:
            assert b.inbox.poll(5000)
            got = b.receive_all()
        assert float(np.abs(got[0].tensors["w"]).max()) == 0.0
        assert not np.shares_memory(arrays_from_state(weights)["w"], weights["w"].numpy())
        assert a.sent[1] == 1 and b.received == 1
        # a message from a sender that is not a peer is counted and dropped
        stranger = ctx.socket(zmq.PUSH)
        stranger.connect(b.endpoint)
        channel.send(stranger, Message(GOSSIP, "w7", "run", meta={"alpha": 0.1}))
        while not b.traffic.dropped["unknown_peer"]:
            assert b.inbox.poll(5000)
            assert b.receive_all() == []
        stranger.close(0)
    finally:
        a.close()
        b.close()
        ctx.term()
