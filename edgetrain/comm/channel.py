"""Sockets that speak the wire format: send and receive with traffic and drop counters."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import zmq

from edgetrain.comm.wire import DEFAULT_MAX_MESSAGE_BYTES, Message, WireError, decode, encode

log = logging.getLogger(__name__)

# Frames below this size are copied by pyzmq; above it they are sent zero-copy.
ZERO_COPY_THRESHOLD = 64 * 1024


@dataclass
class Traffic:
    """Counters of what one process sent and received, and what it dropped and why."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    dropped: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        return {
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "messages_sent": self.messages_sent,
            "messages_received": self.messages_received,
            "dropped": dict(self.dropped),
        }


def bind_random(sock: zmq.Socket, host: str = "127.0.0.1", announce: str | None = None) -> str:
    """Bind to a free port chosen by the OS and return the endpoint peers should connect to."""
    port = sock.bind_to_random_port(f"tcp://{host}")
    return f"tcp://{announce or host}:{port}"


def send(
    sock: zmq.Socket,
    msg: Message,
    traffic: Traffic | None = None,
    identity: bytes | None = None,
    flags: int = 0,
) -> int:
    """Send ``msg`` (to ``identity`` on a ROUTER socket). Returns the bytes put on the wire."""
    frames = encode(msg)
    nbytes = sum(len(f) for f in frames)
    if identity is not None:
        frames = [identity, *frames]
    copy = nbytes < ZERO_COPY_THRESHOLD
    sock.send_multipart(frames, flags=flags, copy=copy)
    if traffic is not None:
        traffic.bytes_sent += nbytes
        traffic.messages_sent += 1
    return nbytes


def recv(
    sock: zmq.Socket,
    run_id: str | None,
    allowed_types: Iterable[str] | None = None,
    traffic: Traffic | None = None,
    router: bool = False,
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    flags: int = 0,
) -> tuple[bytes | None, Message] | None:
    """Receive one message; a malformed one is counted, logged and dropped (returns None).

    On a ROUTER socket the first frame is the peer's identity; the returned identity is
    that frame, else None. Raises ``zmq.Again`` when ``flags`` has NOBLOCK and nothing waits.
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
        msg = decode(frames, run_id, allowed_types, max_bytes=max_bytes)
    except WireError as exc:
        if traffic is not None:
            traffic.dropped[exc.reason] += 1
        log.warning("dropped a message: %s", exc)
        return None
    if traffic is not None:
        traffic.messages_received += 1
    return identity, msg
