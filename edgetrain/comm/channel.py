"""Sockets that speak the wire format: send and receive with traffic and drop counters."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import zmq

from edgetrain.comm.wire import (
    DEFAULT_LIMITS,
    DEFAULT_MAX_MESSAGE_BYTES,
    Limits,
    Message,
    WireError,
    claimed_sender,
    decode,
    encode,
)
from edgetrain.errors import EdgetrainError

log = logging.getLogger(__name__)

# Frames below this size are copied by pyzmq; above it they are sent zero-copy.
ZERO_COPY_THRESHOLD = 64 * 1024
# Dropped messages are logged one by one up to this many per reason, then every 1000th.
LOGGED_DROPS = 10
# Per-peer drop counters keep at most this many peer names; the rest count under OTHER_PEER.
MAX_TRACKED_PEERS = 64
UNKNOWN_PEER = "unknown"
OTHER_PEER = "other"


@dataclass
class Traffic:
    """Counters of what one process sent and received, and what it dropped, why, and from whom.

    ``dropped`` counts by reason; ``dropped_by_peer`` by the sender a message claimed (its header
    is untrusted: a name is only a claim), ``unknown`` when even the header did not parse.
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    # Bytes sent per destination (a worker name, or "coordinator"), for traffic per link class.
    bytes_sent_to: Counter[str] = field(default_factory=Counter)
    messages_sent: int = 0
    messages_received: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    dropped_by_peer: dict[str, Counter[str]] = field(default_factory=dict)

    def drop(self, reason: str, peer: str | None = None) -> None:
        """Count one dropped message (``peer``: who it claims to come from or goes to)."""
        self.dropped[reason] += 1
        name = _peer_label(peer)
        if name not in self.dropped_by_peer and len(self.dropped_by_peer) >= MAX_TRACKED_PEERS:
            name = OTHER_PEER
        self.dropped_by_peer.setdefault(name, Counter())[reason] += 1

    def as_dict(self) -> dict[str, object]:
        return {
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "bytes_sent_to": dict(self.bytes_sent_to),
            "messages_sent": self.messages_sent,
            "messages_received": self.messages_received,
            "dropped": dict(self.dropped),
            "dropped_by_peer": {p: dict(c) for p, c in self.dropped_by_peer.items()},
        }


def _peer_label(peer: str | None) -> str:
    """A short printable label for a (possibly hostile) peer name."""
    if not peer:
        return UNKNOWN_PEER
    label = "".join(ch for ch in peer[:64] if ch.isprintable())
    return label or UNKNOWN_PEER


class BindError(EdgetrainError):
    """A socket could not bind to the address it was given."""


def bind_random(
    sock: zmq.SyncSocket, host: str = "127.0.0.1", announce: str | None = None, what: str = "socket"
) -> str:
    """Bind to a free port chosen by the OS and return the endpoint peers should connect to.

    An address this machine does not have (a wrong ``bind`` in a hosts file) raises
    :class:`BindError` naming the address and ``what`` was binding."""
    try:
        port = sock.bind_to_random_port(f"tcp://{host}")
    except zmq.ZMQError as exc:
        raise BindError(
            f"the {what} cannot bind to address '{host}': {exc.strerror}",
            "use an address of this machine (fix `bind` in the hosts file, or leave it out)",
        ) from None
    return f"tcp://{announce or host}:{port}"


def send(
    sock: zmq.SyncSocket,
    msg: Message,
    traffic: Traffic | None = None,
    identity: bytes | None = None,
    flags: int = 0,
    peer: str | None = None,
) -> int:
    """Send ``msg`` (to ``identity`` on a ROUTER socket). Returns the bytes put on the wire.

    ``peer`` names the destination for the counters (default: the ROUTER identity). Raises
    ``zmq.Again`` (counted as ``send_queue_full`` with NOBLOCK, else ``send_timeout``, under
    the destination) when the message cannot be queued: no peer, or its queue is full, for
    longer than SNDTIMEO.
    """
    frames, nbytes, peer = _framed(msg, identity, peer)
    copy = nbytes < ZERO_COPY_THRESHOLD
    try:
        sock.send_multipart(frames, flags=flags, copy=copy)
    except zmq.Again:
        _count_refused(traffic, flags, peer)
        raise
    if traffic is not None:
        _count_sent(traffic, nbytes, peer)
    return nbytes


def send_tracked(
    sock: zmq.SyncSocket,
    msg: Message,
    traffic: Traffic | None = None,
    identity: bytes | None = None,
    flags: int = 0,
    peer: str | None = None,
) -> tuple[int, list[zmq.MessageTracker]]:
    """:func:`send`, zero-copy whatever the size, with a tracker per frame: the sender must
    not change the arrays it sent until every tracker is done (ZeroMQ has let go of them).
    On an error the trackers of the frames already queued go with the exception's
    ``trackers`` attribute."""
    frames, nbytes, peer = _framed(msg, identity, peer)
    trackers: list[zmq.MessageTracker] = []
    try:
        for i, frame in enumerate(frames):
            more = zmq.SNDMORE if i < len(frames) - 1 else 0
            tracker = sock.send(frame, flags=flags | more, copy=False, track=True)
            if tracker is not None:
                trackers.append(tracker)
    except zmq.ZMQError as exc:
        if isinstance(exc, zmq.Again):
            _count_refused(traffic, flags, peer)
        exc.trackers = trackers  # type: ignore[attr-defined]
        raise
    if traffic is not None:
        _count_sent(traffic, nbytes, peer)
    return nbytes, trackers


def _framed(
    msg: Message, identity: bytes | None, peer: str | None
) -> tuple[list[Any], int, str | None]:
    """The frames of ``msg`` (after ``identity`` on a ROUTER), its bytes on the wire, and the
    peer the counters name (default: the identity)."""
    if peer is None and identity is not None:
        peer = identity.decode("latin-1")
    frames: list[Any] = list(encode(msg))
    nbytes = sum(len(f) for f in frames)
    if identity is not None:
        frames = [identity, *frames]
    return frames, nbytes, peer


def _count_refused(traffic: Traffic | None, flags: int, peer: str | None) -> None:
    if traffic is not None:
        reason = "send_queue_full" if flags & zmq.NOBLOCK else "send_timeout"
        traffic.drop(reason, peer)


def _count_sent(traffic: Traffic, nbytes: int, peer: str | None) -> None:
    traffic.bytes_sent += nbytes
    traffic.messages_sent += 1
    if peer is not None:
        known = peer in traffic.bytes_sent_to or len(traffic.bytes_sent_to) < MAX_TRACKED_PEERS
        traffic.bytes_sent_to[peer if known else OTHER_PEER] += nbytes


def recv(
    sock: zmq.SyncSocket,
    run_id: str | None,
    allowed_types: Iterable[str] | None = None,
    traffic: Traffic | None = None,
    router: bool = False,
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    flags: int = 0,
    limits: Limits = DEFAULT_LIMITS,
    join: bool = True,
) -> tuple[bytes | None, Message] | None:
    """Receive one message; a malformed one is counted, logged and dropped (returns None).
    ``join=False``: tensors of several frames stay unjoined (:func:`~edgetrain.comm.wire.decode`).

    On a ROUTER socket the first frame is the peer's identity; the returned identity is
    that frame, else None. Raises ``zmq.Again`` when ``flags`` has NOBLOCK and nothing waits.
    A message beyond ``limits`` (too many frames, tensors or bytes) is dropped as well.
    """
    frames = sock.recv_multipart(flags=flags, copy=False)
    identity: bytes | None = None
    if router:
        identity = frames[0].bytes
        frames = frames[1:]
    nbytes = sum(len(f.buffer) for f in frames)
    if traffic is not None:
        traffic.bytes_received += nbytes
    try:
        msg = decode(frames, run_id, allowed_types, max_bytes=max_bytes, limits=limits, join=join)
    except WireError as exc:
        count = 0
        if traffic is not None:
            traffic.drop(exc.reason, claimed_sender(frames[0]) if frames else None)
            count = traffic.dropped[exc.reason]
        if count <= LOGGED_DROPS or count % 1000 == 0:  # a flood must not flood the log
            log.warning("dropped a message (%s #%d): %s", exc.reason, count, exc)
        return None
    if traffic is not None:
        traffic.messages_received += 1
    return identity, msg
