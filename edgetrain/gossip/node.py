"""A gossip node's sockets: one PULL inbox it binds, one PUSH outbox per peer."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping

import zmq

from edgetrain.comm import channel, protocol
from edgetrain.comm.channel import Traffic
from edgetrain.comm.wire import MAX_FRAME_BYTES, Message

log = logging.getLogger(__name__)


class GossipNode:
    """Sends weights to peers without blocking and receives theirs, counting both."""

    def __init__(
        self,
        ctx: zmq.Context,
        worker_id: int,
        run_id: str,
        traffic: Traffic,
        bind_host: str = "127.0.0.1",
        announce_host: str | None = None,
        send_hwm: int = 64,
    ) -> None:
        self.ctx = ctx
        self.worker_id = worker_id
        self.name = protocol.worker_name(worker_id)
        self.run_id = run_id
        self.traffic = traffic
        self.send_hwm = send_hwm
        self.inbox = ctx.socket(zmq.PULL)
        self.inbox.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        self.inbox.setsockopt(zmq.LINGER, 0)
        self.endpoint = channel.bind_random(self.inbox, bind_host, announce_host)
        self.outboxes: dict[int, zmq.Socket] = {}
        self.peer_names: set[str] = set()
        self.sent: Counter[int] = Counter()
        self.received = 0

    def connect(self, peers: Mapping[int, str]) -> None:
        """Open an outbox to every peer but this node."""
        for peer_id, endpoint in peers.items():
            if peer_id == self.worker_id or peer_id in self.outboxes:
                continue
            sock = self.ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, self.send_hwm)
            sock.setsockopt(zmq.LINGER, 2000)
            sock.connect(endpoint)
            self.outboxes[peer_id] = sock
            self.peer_names.add(protocol.worker_name(peer_id))

    @property
    def peers(self) -> list[int]:
        return sorted(self.outboxes)

    def send(self, peer_id: int, msg: Message) -> bool:
        """Queue ``msg`` for ``peer_id``; False (and counted) if its queue is full."""
        try:
            channel.send(self.outboxes[peer_id], msg, self.traffic, flags=zmq.NOBLOCK)
        except zmq.Again:
            self.traffic.dropped["send_queue_full"] += 1
            return False
        self.sent[peer_id] += 1
        return True

    def receive_all(self) -> list[Message]:
        """Every valid gossip message waiting in the inbox, without blocking."""
        out: list[Message] = []
        while True:
            try:
                got = channel.recv(
                    self.inbox,
                    self.run_id,
                    protocol.BETWEEN_PEERS,
                    self.traffic,
                    flags=zmq.NOBLOCK,
                )
            except zmq.Again:
                return out
            if got is None:
                continue
            msg = got[1]
            if msg.sender not in self.peer_names:
                self.traffic.dropped["unknown_peer"] += 1
                continue
            self.received += 1
            out.append(msg)

    def close(self) -> None:
        for sock in self.outboxes.values():
            sock.close()
        self.inbox.close()
