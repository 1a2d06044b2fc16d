"""Link probe over ZeroMQ in the wire format: round-trip time, bandwidth and per-transfer overhead.

The client (DEALER) sends ``probe_ping`` messages (no tensors) for the round-trip time, then
``probe_data`` messages carrying one uint8 tensor of several sizes; the server (ROUTER) answers
each with a small ``probe_ack``. The time from sending a transfer to receiving its ack (the
fastest of the repeats) is fitted to DynaComm's ``time = dt + bytes / bandwidth``, the
bandwidth coming from the large transfers (:func:`fit_overhead`). ``dt`` therefore includes
the ack's return trip: one request/response per transmission is what a parameter-server pull
or push costs. On a tbf-limited link the bucket's burst lets the first bytes of every message
pass at line rate, which can offset the overhead entirely (``dt`` is clamped at 0).
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import zmq

from edgetrain.comm import sockets
from edgetrain.comm.channel import Traffic, recv, send
from edgetrain.comm.wire import Message
from edgetrain.errors import EdgetrainError

log = logging.getLogger(__name__)

RUN_ID = "probe"
PING, DATA, ACK = "probe_ping", "probe_data", "probe_ack"
DEFAULT_SIZES = (2**16, 2**18, 2**20, 2**22, 2**24)
MAX_PROBE_BYTES = 2**28
_ENDPOINT = re.compile(r"^tcp://[^\s:/]+:\d{1,5}$")


class ProbeError(EdgetrainError):
    """A peer that cannot be probed."""


@dataclass(frozen=True)
class ProbeConfig:
    """How to probe: ping count, transfer sizes and repeats, time limits."""

    pings: int = 20
    sizes: tuple[int, ...] = DEFAULT_SIZES
    repeats: int = 3
    max_transfer_s: float = 2.0
    connect_timeout_s: float = 5.0
    transfer_timeout_s: float = 60.0

    def up_to(self, max_bytes: int) -> ProbeConfig:
        """The same probe with transfer sizes capped at ``max_bytes`` (which is always kept)."""
        sizes = tuple(s for s in self.sizes if s < max_bytes) + (max_bytes,)
        return replace(self, sizes=sizes)


@dataclass(frozen=True)
class LinkProfile:
    """One link's measured figures (the ``links`` entries of a profile)."""

    peer: str
    bandwidth_Bps: float
    rtt_s: float
    dt_s: float
    bandwidth_large_Bps: float
    rtt_iqr_s: float
    sizes: tuple[int, ...]
    times_s: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sizes"], d["times_s"] = list(self.sizes), list(self.times_s)
        return d


def check_endpoint(peer: str) -> str:
    if not _ENDPOINT.match(peer) or not 0 < int(peer.rsplit(":", 1)[1]) < 65536:
        raise ProbeError(f"peer {peer!r} is not an endpoint", "write it as tcp://HOST:PORT")
    return peer


def fit_overhead(sizes: Sequence[int], times: Sequence[float]) -> tuple[float, float]:
    """Fit ``t = dt + b / bw`` to transfers of several sizes; return ``(dt >= 0, bw)``.

    The bandwidth comes from the two largest transfers (their time difference over their size
    difference, so a fixed overhead cancels): small messages on a fast link are dominated by
    per-message costs that do not scale with size. ``dt`` is then the least-squares intercept
    for that slope, the mean of ``t - b / bw`` over all sizes. If the largest transfer was not
    the slowest (noise), the bandwidth falls back to its bytes over its time.
    """
    order = np.argsort(np.asarray(sizes))
    b = np.asarray(sizes, dtype=float)[order]
    t = np.asarray(times, dtype=float)[order]
    if b.size >= 2 and t[-1] > t[-2] and b[-1] > b[-2]:
        bw = float((b[-1] - b[-2]) / (t[-1] - t[-2]))
    else:
        bw = float(b[-1] / t[-1])
    return max(float(np.mean(t - b / bw)), 0.0), bw


class ProbeServer:
    """Answers probes until ``stop`` is set. Use as a context manager (binds on enter)."""

    def __init__(self, bind: str = "127.0.0.1", port: int = 0) -> None:
        self.bind, self.port = bind, port
        self.ctx: zmq.Context[Any] | None = None
        self.sock: zmq.Socket[Any] | None = None
        self.endpoint = ""
        self.traffic = Traffic()

    def __enter__(self) -> ProbeServer:
        self.ctx = zmq.Context()
        self.sock = sockets.server(self.ctx, zmq.ROUTER)
        try:
            if self.port:
                self.sock.bind(f"tcp://{self.bind}:{self.port}")
                port = self.port
            else:
                port = self.sock.bind_to_random_port(f"tcp://{self.bind}")
            # a wildcard address is announced under this host's name, which peers can resolve
            host = socket.gethostname() if self.bind in ("0.0.0.0", "*", "::") else self.bind
            self.endpoint = f"tcp://{host}:{port}"
        except zmq.ZMQError as exc:
            self.__exit__(None, None, None)
            raise ProbeError(f"cannot bind tcp://{self.bind}:{self.port}: {exc}") from None
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
        if self.ctx is not None:
            self.ctx.term()
        self.sock = self.ctx = None

    def serve(self, stop: threading.Event, poll_ms: int = 200) -> None:
        assert self.sock is not None, "use ProbeServer as a context manager"
        while not stop.is_set():
            if not self.sock.poll(poll_ms):
                continue
            got = recv(
                self.sock,
                RUN_ID,
                (PING, DATA),
                self.traffic,
                router=True,
                max_bytes=MAX_PROBE_BYTES,
            )
            if got is None:
                continue
            identity, msg = got
            ack = Message(ACK, "probe-server", RUN_ID, meta={"seq": msg.meta.get("seq", 0)})
            ack.meta["bytes"] = msg.tensor_bytes
            try:
                send(self.sock, ack, self.traffic, identity=identity)
            except zmq.Again:
                log.warning("probe ack to a vanished client dropped")


class _Client:
    def __init__(self, peer: str, cfg: ProbeConfig) -> None:
        self.cfg = cfg
        self.ctx: zmq.Context[Any] = zmq.Context()
        opts = sockets.SocketOptions(
            send_timeout_ms=int(cfg.transfer_timeout_s * 1000),
            recv_timeout_ms=int(cfg.transfer_timeout_s * 1000),
            linger_ms=0,
        )
        self.sock = sockets.client(self.ctx, zmq.DEALER, opts=opts)
        self.sock.connect(peer)
        self.peer = peer
        self.seq = 0

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()

    def exchange(self, kind: str, payload: np.ndarray | None, timeout_s: float) -> float:
        """Send one message and wait for its ack; return the seconds in between."""
        self.seq += 1
        tensors = {"payload": payload} if payload is not None else {}
        msg = Message(kind, "probe-client", RUN_ID, meta={"seq": self.seq}, tensors=tensors)
        t0 = time.perf_counter()
        send(self.sock, msg)
        deadline = t0 + timeout_s
        while True:
            left = deadline - time.perf_counter()
            if left <= 0 or not self.sock.poll(int(left * 1000) + 1):
                raise ProbeError(
                    f"peer {self.peer} did not answer within {timeout_s:g} s",
                    "is 'edgetrain profile serve' running there and reachable?",
                )
            got = recv(self.sock, RUN_ID, (ACK,))
            if got is not None and got[1].meta.get("seq") == self.seq:
                return time.perf_counter() - t0


def probe_link(
    peer: str, cfg: ProbeConfig = ProbeConfig(), progress: Callable[[str], None] | None = None
) -> LinkProfile:
    """Measure the link to the probe server at ``peer`` (``tcp://HOST:PORT``)."""
    check_endpoint(peer)
    client = _Client(peer, cfg)
    try:
        client.exchange(PING, None, cfg.connect_timeout_s)  # connects; also a warm-up
        rtts = [client.exchange(PING, None, cfg.connect_timeout_s) for _ in range(cfg.pings)]
        if progress:
            progress("rtt")
        sizes, times = _transfers(client, cfg, progress)
    finally:
        client.close()
    dt, bw = fit_overhead(sizes, times)
    q75, q25 = np.percentile(rtts, [75, 25])
    return LinkProfile(
        peer=peer,
        bandwidth_Bps=bw,
        rtt_s=float(np.median(rtts)),
        dt_s=dt,
        bandwidth_large_Bps=sizes[-1] / times[-1],
        rtt_iqr_s=float(q75 - q25),
        sizes=tuple(sizes),
        times_s=tuple(times),
    )


def _transfers(
    client: _Client, cfg: ProbeConfig, progress: Callable[[str], None] | None
) -> tuple[list[int], list[float]]:
    """Fastest send-to-ack time per size (other work on either host only adds time, so the
    fastest repeat is the link's own); sizes predicted to exceed the time limit are skipped."""
    sizes: list[int] = []
    times: list[float] = []
    rate = 0.0
    for size in sorted(cfg.sizes):
        if rate and size / rate > cfg.max_transfer_s and len(sizes) >= 2:
            break
        payload = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
        client.exchange(DATA, payload, cfg.transfer_timeout_s)  # warm-up
        runs = [client.exchange(DATA, payload, cfg.transfer_timeout_s) for _ in range(cfg.repeats)]
        sizes.append(size)
        times.append(min(runs))
        rate = size / times[-1]
        if progress:
            progress(f"{size} bytes")
    return sizes, times
