"""A gossip node's sockets: one PULL inbox it binds, one PUSH outbox per peer.

Gossip is the family's own peer traffic: its message types live in the family, not in the
control protocol (GoSGD's ``gossip`` here; the exchange techniques' in
:mod:`edgetrain.gossip.exchange.messages`, passed as ``types``). An outbox holds at most
``send_hwm`` messages (2 by default, ``[gossip] outbox``): a sender checks that there is room
*before* it snapshots its weights, so a slow or dead peer costs a counted ``send_queue_full``
and never pins dozens of model copies in memory.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace

import zmq

from edgetrain.comm import protocol, sockets
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Message

GOSSIP = "gossip"
PEER_TYPES = (GOSSIP,)

# The inbox drops what waits in it at close; outboxes get 2 s to hand over what they queued.
INBOX = sockets.SocketOptions(linger_ms=0)
OUTBOX = sockets.SocketOptions(linger_ms=2000)

log = logging.getLogger(__name__)


class GossipNode:
    """Sends weights to peers without blocking and receives theirs, counting both."""

    def __init__(
        self,
        transport: Transport,
        send_hwm: int = 2,
        types: tuple[str, ...] = PEER_TYPES,
        keep_buffers: bool = False,
        uncounted: tuple[str, ...] = (),
    ) -> None:
        """Messages of the ``uncounted`` types (a rejoining worker's request for the model
        and its answer) stay out of the send and receive counts the drain compares."""
        self.transport = transport
        self.worker_id = transport.worker_id
        self.name = transport.name
        self.run_id = transport.run_id
        self.traffic = transport.traffic
        self.send_hwm = send_hwm
        self.types = types
        self.uncounted = frozenset(uncounted)
        if keep_buffers:  # [gossip] keep_buffers: received weights land in warm memory
            sockets.keep_freed_buffers()
        what = f"gossip inbox of worker {transport.worker_id}"
        self.inbox, self.endpoint = transport.bind(zmq.PULL, INBOX, what=what)
        log.info("gossip inbox listening on %s", self.endpoint)
        self.outboxes: dict[int, zmq.SyncSocket] = {}
        self.peer_names: set[str] = set()
        self.peer_ids: dict[str, int] = {}
        self.sent: Counter[int] = Counter()
        self.received_from: Counter[str] = Counter()  # valid messages, by sender name

    def connect(self, peers: Mapping[int, str]) -> None:
        """Open an outbox to every peer but this node."""
        for peer_id, endpoint in peers.items():
            if peer_id == self.worker_id or peer_id in self.outboxes:
                continue
            opts = replace(OUTBOX, send_hwm=self.send_hwm)
            self.outboxes[peer_id] = self.transport.connect(zmq.PUSH, endpoint, opts)
            self._know(peer_id)

    def expect(self, peer_ids: Iterable[int]) -> None:
        """Take messages from ``peer_ids`` too, before any outbox to them exists: new workers
        that may join the run in open slots (their ask for the model can come before the
        coordinator's word that they joined)."""
        for peer_id in peer_ids:
            if peer_id != self.worker_id:
                self._know(peer_id)

    def _know(self, peer_id: int) -> None:
        """Accept messages from ``peer_id`` (the inbox drops those of unknown senders)."""
        name = protocol.worker_name(peer_id)
        self.peer_names.add(name)
        self.peer_ids[name] = peer_id

    def reconnect(self, peer_id: int, endpoint: str) -> None:
        """Point the outbox for ``peer_id`` at ``endpoint`` (it rejoined with a new process):
        what waited for its old process is dropped, and the count of what was sent to it
        starts again, since its new process counts what it receives from zero."""
        old = self.outboxes.pop(peer_id, None)
        if old is not None:
            old.close(linger=0)
        self.sent.pop(peer_id, None)
        self.connect({peer_id: endpoint})

    @property
    def peers(self) -> list[int]:
        return sorted(self.outboxes)

    def has_room(self, peer_id: int) -> bool:
        """True if a message for ``peer_id`` can be queued now; else counts ``send_queue_full``.

        Ask before building a message: a full queue then costs no snapshot of the weights."""
        if self.outboxes[peer_id].poll(0, zmq.POLLOUT):
            return True
        self.traffic.drop("send_queue_full", protocol.worker_name(peer_id))
        return False

    def wait_room(self, peer_id: int, timeout_ms: int) -> bool:
        """True once a message for ``peer_id`` can be queued, waiting at most ``timeout_ms``
        (nothing is counted: the caller decides what a full queue means)."""
        return bool(self.outboxes[peer_id].poll(timeout_ms, zmq.POLLOUT))

    def send(self, peer_id: int, msg: Message) -> bool:
        """Queue ``msg`` for ``peer_id`` without blocking; False (counted) if its queue is full.

        A peer that is down or restarting keeps its queue: ZeroMQ reconnects to the same
        endpoint and delivers what waits there, up to ``send_hwm`` messages.
        """
        try:
            self.transport.send(
                self.outboxes[peer_id], msg, flags=zmq.NOBLOCK, peer=protocol.worker_name(peer_id)
            )
        except zmq.Again:  # counted by channel.send as send_queue_full
            return False
        if msg.type not in self.uncounted:
            self.sent[peer_id] += 1
        return True

    def receive_all(self) -> list[Message]:
        """Every valid gossip message waiting in the inbox, without blocking."""
        out: list[Message] = []
        while True:
            try:
                got = self.transport.recv(self.inbox, self.types, flags=zmq.NOBLOCK)
            except zmq.Again:
                return out
            if got is None:
                continue
            msg = got[1]
            if msg.sender not in self.peer_names:
                self.traffic.drop("unknown_peer", msg.sender)
                continue
            if msg.type not in self.uncounted:
                self.received_from[msg.sender] += 1
            out.append(msg)

    @property
    def received(self) -> int:
        return sum(self.received_from.values())

    def close(self) -> None:
        for sock in self.outboxes.values():
            sock.close()
        self.inbox.close()


class NodeHolder:
    """A gossip runner's hold on its :class:`GossipNode`: bound in ``setup``, closed however
    the worker ends."""

    node: GossipNode | None = None

    def close(self) -> None:
        if self.node is not None:
            self.node.close()

    @property
    def _node(self) -> GossipNode:
        assert self.node is not None, "setup() binds the gossip inbox"
        return self.node
