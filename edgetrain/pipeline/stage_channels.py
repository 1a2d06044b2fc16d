"""A stage's channels: activations in from the stage before, errors in from the stage after,
one connection per direction per link (ZeroMQ keeps order on one connection).

Every socket comes from the worker's :class:`~edgetrain.comm.transport.Transport`; inboxes
bind to random ports announced in ``ready``. High-water marks are m_s + 1: a send blocks only
when the design says it should. Waiting for a message serves the coordinator meanwhile (a stop
or a failed peer ends the wait) and names what it waited on when it gives up."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
import zmq

from edgetrain.comm import activity, protocol, sockets
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Message
from edgetrain.errors import RunError
from edgetrain.pipeline.accounting import Timers

INBOX = sockets.SocketOptions(linger_ms=0)
OUTBOX = sockets.SocketOptions(linger_ms=5000)
POLL_MS = 200
# Idle gaps an inbox lists one by one in its reports (about 10 bytes each); later ones are
# counted and summed. A report (an epoch's end) must stay within the wire's header limit.
MAX_GAPS = 1024


class PeerLost(RunError):
    """A stage this one needs failed or stopped answering."""


def bind_inbox(transport: Transport, hwm: int, what: str) -> tuple[zmq.SyncSocket, str]:
    """A PULL socket bound to a random port, and the endpoint peers connect to."""
    return transport.bind(zmq.PULL, replace(INBOX, recv_hwm=hwm), what=what)


def connect_outbox(
    transport: Transport, endpoint: str, hwm: int, timeout_s: float
) -> zmq.SyncSocket:
    opts = replace(OUTBOX, send_hwm=hwm, send_timeout_ms=int(timeout_s * 1000))
    return transport.connect(zmq.PUSH, endpoint, opts)


def to_tensor(arr: np.ndarray) -> torch.Tensor:
    """A received (read-only) array as a tensor of its own."""
    return torch.from_numpy(np.array(arr, copy=True))


@dataclass
class Arrivals:
    """What arrived on one inbox, and when.

    Two rates: over the span from the first arrival to the last (the bytes after the first),
    which is the link's rate only while the link never waits on the schedule; and over the
    link's busy time, the union of every message's [sent, arrived] interval (the sender stamps
    ``sent_at`` with its wall clock), which counts a message queued behind another from when it
    was handed to the link. The second needs the hosts' clocks to agree (one machine's clock on
    an emulated testbed); a stamp that is not a number, or later than the arrival, is ignored."""

    messages: int = 0
    first_s: float | None = None
    last_s: float | None = None
    bytes_after_first: int = 0
    bytes_stamped: int = 0
    busy_s: float = 0.0
    periods: int = 0  # busy intervals
    gaps: list[float] = field(default_factory=list)  # idle time between them (a rate
    # limiter's bucket refills meanwhile), the first MAX_GAPS; the others counted and summed,
    # so that every report stays small however long the run
    more_gaps: int = 0
    more_gaps_s: float = 0.0
    _open: tuple[float, float] | None = None  # the busy interval still growing

    def add(self, at: float, nbytes: int, sent_at: float | None = None, now: float = 0.0) -> None:
        """A message of ``nbytes`` taken at monotonic time ``at``; ``sent_at`` (the sender's
        wall clock) and ``now`` (ours) place it on the link."""
        if self.first_s is None:
            self.first_s = at
        else:
            self.bytes_after_first += nbytes
        self.last_s = at
        self.messages += 1
        if sent_at is None or not math.isfinite(sent_at) or sent_at > now:
            return
        self.bytes_stamped += nbytes
        if self._open is not None and sent_at <= self._open[1]:
            self._open = (self._open[0], max(self._open[1], now))
            return
        if self._open is not None:
            self.busy_s += self._open[1] - self._open[0]
            gap = sent_at - self._open[1]
            if len(self.gaps) < MAX_GAPS:
                self.gaps.append(gap)
            else:
                self.more_gaps += 1
                self.more_gaps_s += gap
        self._open = (sent_at, now)
        self.periods += 1

    def as_dict(self) -> dict[str, Any]:
        span = (
            self.last_s - self.first_s
            if self.first_s is not None and self.last_s is not None
            else None
        )
        busy = self.busy_s + (self._open[1] - self._open[0] if self._open is not None else 0.0)
        return {
            "messages": self.messages,
            "span_s": span,
            "bytes_after_first": self.bytes_after_first,
            "rate_bps": 8 * self.bytes_after_first / span if span else None,
            "busy_s": busy,
            "busy_periods": self.periods,
            "idle_gaps_s": [round(g, 6) for g in self.gaps],
            "idle_gaps_more": self.more_gaps,
            "idle_gaps_more_s": self.more_gaps_s,
            "bytes_stamped": self.bytes_stamped,
            "busy_rate_bps": 8 * self.bytes_stamped / busy if busy > 0 else None,
        }


class Links:
    """The sockets of one stage (or replica) and the waits on them."""

    def __init__(
        self, transport: Transport, timers: Timers, timeout_s: float, serve: Callable[[], None]
    ) -> None:
        self.transport = transport
        self.name = transport.name
        self.traffic = transport.traffic
        self.timers = timers
        self.timeout_s = timeout_s
        self.serve = serve  # handles the coordinator (raises on stop)
        self.inboxes: dict[str, zmq.SyncSocket] = {}
        self.outboxes: dict[str, zmq.SyncSocket] = {}
        self.peers: dict[str, str] = {}  # outbox name -> peer worker name
        self.arrivals: dict[str, Arrivals] = {}  # inbox name -> what arrived on it
        self.last_wait_s = 0.0  # how long the latest receive waited

    def bind(self, name: str, hwm: int, what: str) -> str:
        sock, endpoint = bind_inbox(self.transport, hwm, what)
        self.inboxes[name] = sock
        return endpoint

    def connect(self, name: str, endpoint: str, peer: int, hwm: int) -> None:
        self.outboxes[name] = connect_outbox(self.transport, endpoint, hwm, self.timeout_s)
        self.peers[name] = protocol.worker_name(peer)

    def reconnect(self, name: str, endpoint: str, peer: int, hwm: int) -> None:
        """Connect outbox ``name`` to its peer's new endpoint (a restarted process); what the
        old socket still held for the lost one is dropped."""
        old = self.outboxes.pop(name, None)
        if old is not None:
            old.close(linger=0)
        self.connect(name, endpoint, peer, hwm)

    def send(
        self,
        name: str,
        kind: str,
        meta: Mapping[str, Any],
        tensors: dict[str, np.ndarray],
        epoch: int = 0,
        step: int = 0,
    ) -> None:
        stamped = {**meta, "sent_at": time.time()}  # when it was handed to the link
        msg = self.transport.message(kind, stamped, tensors, step=step, epoch=epoch)
        t0 = time.perf_counter()
        try:
            self.transport.send(self.outboxes[name], msg, peer=self.peers[name])
        except zmq.Again:
            raise PeerLost(
                f"{self.name}: {self.peers[name]} took no {kind} for {self.timeout_s:.0f} s"
            ) from None
        finally:
            self.timers.add("send_s", time.perf_counter() - t0)

    def receive(
        self,
        name: str,
        kinds: tuple[str, ...],
        accept: Callable[[Message], str | None],
        what: str,
        on: str = "a neighbour",
    ) -> Message:
        """The next message on inbox ``name`` that ``accept`` (returning a drop reason or None)
        takes; what it refuses is counted and dropped. While nothing has come, the heartbeats
        say this process waits on ``on`` for ``what`` (``edgetrain status``)."""
        sock = self.inboxes[name]
        t0 = time.perf_counter()
        deadline = time.monotonic() + self.timeout_s
        said = contextlib.ExitStack()
        waiting = False
        try:
            while True:
                # the first look does not block: only a real wait is said
                if sock.poll(POLL_MS if waiting else 0, zmq.POLLIN):
                    before = self.traffic.bytes_received
                    got = self.transport.recv(sock, kinds, flags=zmq.NOBLOCK)
                    if got is None:
                        continue
                    msg = got[1]
                    reason = accept(msg)
                    if reason is None:
                        nbytes = self.traffic.bytes_received - before
                        sent = msg.meta.get("sent_at")
                        stamp = (
                            float(sent)
                            if isinstance(sent, (int, float)) and not isinstance(sent, bool)
                            else None
                        )
                        self.arrivals.setdefault(name, Arrivals()).add(
                            time.monotonic(), nbytes, stamp, time.time()
                        )
                        return msg
                    self.traffic.drop(reason, msg.sender)
                    continue
                if not waiting:
                    said.enter_context(activity.waiting(on, what))
                    waiting = True
                    continue
                self.serve()
                if time.monotonic() > deadline:
                    raise PeerLost(
                        f"{self.name} waited {self.timeout_s:.0f} s for {what}; is that "
                        "process alive? ([pipeline] recv_timeout_s)"
                    )
        finally:
            said.close()
            self.last_wait_s = time.perf_counter() - t0
            self.timers.add("wait_s", self.last_wait_s)

    def sent_by_outbox(self) -> dict[str, int]:
        """Bytes sent on each outbox (to its peer)."""
        return {name: self.traffic.bytes_sent_to.get(peer, 0) for name, peer in self.peers.items()}

    def link_figures(self) -> dict[str, Any]:
        """Bytes sent per outbox and what arrived per inbox, for the report."""
        return {
            "sent": self.sent_by_outbox(),
            "arrived": {name: a.as_dict() for name, a in self.arrivals.items()},
        }

    def close(self) -> None:
        for sock in self.outboxes.values():
            sock.close()
        for sock in self.inboxes.values():
            sock.close(linger=0)
        self.outboxes.clear()
        self.inboxes.clear()
