"""A worker's transport, taken once: its ZeroMQ context, run, name on the wire, traffic
counters, CURVE keys and the addresses it binds and announces; and what every peer transport
does with them: bind an inbox, connect to a peer, send and receive.

The runtime's :class:`~edgetrain.runtime.context.WorkerContext` holds these values. ``comm``
sits below the runtime, so :meth:`Transport.of` takes any object that has them
(:class:`TransportValues`): a family's peer traffic (the parameter-server trainer's
transmitter, Mercury's peer thread, a pipeline stage's channels) is built from one
``Transport.of(ctx)``; the coordinator client, made before the context exists, builds its own
from the worker's options."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import zmq

from edgetrain.comm import channel, protocol, sockets
from edgetrain.comm.channel import Traffic
from edgetrain.comm.security import CurveKeys
from edgetrain.comm.wire import DEFAULT_LIMITS, Limits, Message

ZmqContext = zmq.SyncContext


class TransportValues(Protocol):
    """What :meth:`Transport.of` reads (the runtime's ``WorkerContext`` has all of it)."""

    zmq: ZmqContext
    run_id: str
    worker_id: int
    traffic: Traffic
    keys: CurveKeys | None
    bind_host: str
    announce_host: str | None


@dataclass(frozen=True)
class Transport:
    """One worker's sockets' common ground: every socket, message and counter goes through it."""

    context: ZmqContext
    run_id: str
    worker_id: int
    traffic: Traffic
    keys: CurveKeys | None = None
    bind_host: str = "127.0.0.1"
    announce_host: str | None = None
    # The run's message limits: every socket refuses bigger frames, every receipt more frames.
    limits: Limits = DEFAULT_LIMITS

    @classmethod
    def of(cls, values: TransportValues) -> Transport:
        """The transport of a worker context (its ``limits``, where it has them)."""
        limits = getattr(values, "limits", DEFAULT_LIMITS)
        return cls(
            values.zmq, values.run_id, values.worker_id, values.traffic, values.keys,
            values.bind_host, values.announce_host, limits,
        )  # fmt: skip

    @property
    def name(self) -> str:
        """This worker's name on the wire (``w<id>``): the sender of what it sends."""
        return protocol.worker_name(self.worker_id)

    def message(
        self,
        kind: str,
        meta: dict[str, Any] | None = None,
        tensors: dict[str, np.ndarray] | None = None,
        *,
        step: int = 0,
        epoch: int = 0,
    ) -> Message:
        """A message of ``kind`` from this worker in this run."""
        return Message(kind, self.name, self.run_id, step, epoch, meta or {}, tensors or {})

    def bind(
        self, kind: int, opts: sockets.SocketOptions = sockets.DEFAULT, *, what: str
    ) -> tuple[zmq.SyncSocket, str]:
        """A binding socket on a random port of ``bind_host``, and the endpoint peers connect
        to (on ``announce_host``); ``what`` names it if it cannot bind (it is closed then)."""
        sock = sockets.server(self.context, kind, self.keys, sockets.bounded(opts, self.limits))
        try:
            endpoint = channel.bind_random(sock, self.bind_host, self.announce_host, what=what)
        except BaseException:
            sock.close(linger=0)
            raise
        return sock, endpoint

    def connect(
        self,
        kind: int,
        endpoint: str,
        opts: sockets.SocketOptions = sockets.DEFAULT,
        identity: str | None = None,
    ) -> zmq.SyncSocket:
        """A connecting socket to ``endpoint`` (a DEALER under ``identity``, when given)."""
        ident = identity.encode() if identity is not None else None
        opts = sockets.bounded(opts, self.limits)
        sock = sockets.client(self.context, kind, self.keys, opts, ident)
        sock.connect(endpoint)
        return sock

    def send(
        self,
        sock: zmq.SyncSocket,
        msg: Message,
        *,
        peer: str | None = None,
        identity: bytes | None = None,
        flags: int = 0,
    ) -> int:
        """:func:`channel.send` with this worker's counters; the bytes put on the wire."""
        return channel.send(sock, msg, self.traffic, identity, flags, peer)

    def send_tracked(
        self,
        sock: zmq.SyncSocket,
        msg: Message,
        *,
        peer: str | None = None,
        identity: bytes | None = None,
        flags: int = 0,
    ) -> tuple[int, list[zmq.MessageTracker]]:
        """:func:`channel.send_tracked` with this worker's counters: zero-copy, with the
        trackers that say when ZeroMQ has let go of the arrays."""
        return channel.send_tracked(sock, msg, self.traffic, identity, flags, peer)

    def recv(
        self,
        sock: zmq.SyncSocket,
        types: Iterable[str] | None,
        *,
        router: bool = False,
        flags: int = 0,
        join: bool = True,
    ) -> tuple[bytes | None, Message] | None:
        """:func:`channel.recv` of this run's messages of ``types``, with this worker's
        counters (None: a malformed message, counted and dropped)."""
        return channel.recv(
            sock, self.run_id, types, self.traffic, router=router, flags=flags,
            limits=self.limits, join=join,
        )  # fmt: skip
