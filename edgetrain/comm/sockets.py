"""Socket factory: every edgetrain socket gets the same timeouts, limits and optional CURVE."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import threading
from dataclasses import dataclass, replace
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator

from edgetrain.comm.security import CurveKeys
from edgetrain.comm.wire import MAX_FRAME_BYTES, MAX_HEADER_BYTES, Limits

log = logging.getLogger(__name__)

# Bytes CURVE adds to a frame on the wire (command name, nonce, MAC, flags: 33 in ZeroMQ 4.3).
FRAME_OVERHEAD = 4096


@dataclass(frozen=True)
class SocketOptions:
    """Options applied to a socket; -1 means "no limit" as in ZeroMQ."""

    send_timeout_ms: int = 30_000
    recv_timeout_ms: int = 30_000
    linger_ms: int = 1000
    reconnect_ivl_ms: int = 100
    reconnect_ivl_max_ms: int = 2000
    # Largest frame a peer may send before it is disconnected: a tensor frame or a header, plus
    # room for CURVE's per-frame overhead (ZeroMQ checks the size of the encrypted frame).
    max_frame_bytes: int = max(MAX_FRAME_BYTES, MAX_HEADER_BYTES) + FRAME_OVERHEAD
    send_hwm: int = 1000
    recv_hwm: int = 1000
    tcp_keepalive_idle_s: int = 30
    tcp_keepalive_intvl_s: int = 10
    tcp_keepalive_cnt: int = 3
    # Kernel socket buffers (0: the OS default, which autotunes).
    sndbuf: int = 0
    rcvbuf: int = 0


DEFAULT = SocketOptions()


def bounded(opts: SocketOptions, limits: Limits) -> SocketOptions:
    """``opts`` refusing frames larger than a run's ``limits`` allow (ZeroMQ's MAXMSGSIZE,
    which bounds each frame; the count of frames is checked on receipt, see ``wire.Limits``)."""
    frame = min(opts.max_frame_bytes, limits.frame_bytes + FRAME_OVERHEAD)
    return replace(opts, max_frame_bytes=frame)


def _apply(sock: zmq.SyncSocket, opts: SocketOptions) -> None:
    sock.setsockopt(zmq.SNDTIMEO, opts.send_timeout_ms)
    sock.setsockopt(zmq.RCVTIMEO, opts.recv_timeout_ms)
    sock.setsockopt(zmq.LINGER, opts.linger_ms)
    sock.setsockopt(zmq.RECONNECT_IVL, opts.reconnect_ivl_ms)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, opts.reconnect_ivl_max_ms)
    sock.setsockopt(zmq.MAXMSGSIZE, opts.max_frame_bytes)
    sock.setsockopt(zmq.SNDHWM, opts.send_hwm)
    sock.setsockopt(zmq.RCVHWM, opts.recv_hwm)
    sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, opts.tcp_keepalive_idle_s)
    sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, opts.tcp_keepalive_intvl_s)
    sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, opts.tcp_keepalive_cnt)
    if opts.sndbuf:
        sock.setsockopt(zmq.SNDBUF, opts.sndbuf)
    if opts.rcvbuf:
        sock.setsockopt(zmq.RCVBUF, opts.rcvbuf)


# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4


# What keep_freed_buffers keeps by default, and the least any caller's bound comes to.
KEEP_BYTES = 2**30
MIN_KEEP_BYTES = 64 * 2**20


def keep_bytes_for(message_bytes: int) -> int:
    """A bound on kept memory for a process that receives messages of about ``message_bytes``
    (twice that, at least :data:`MIN_KEEP_BYTES`, at most :data:`KEEP_BYTES`). Pure."""
    return int(min(KEEP_BYTES, max(MIN_KEEP_BYTES, 2 * message_bytes)))


@functools.lru_cache(maxsize=4)
def keep_freed_buffers(keep_bytes: int = KEEP_BYTES) -> bool:
    """Let this process reuse freed large buffers instead of returning them to the OS.

    ZeroMQ allocates a fresh buffer for every received frame (up to 16 MiB); glibc serves
    those with mmap and unmaps them on free, so every message pays a page fault per 4 KiB.
    Serving them (and the arrays that join a tensor's frames) from the heap, and keeping up to
    ``keep_bytes`` of freed memory at the heap's top, makes a receiver's buffers warm after the
    first message: on loopback this is the difference between about half of raw TCP
    throughput and parity (scripts/bench_transport). The cost: that much freed memory stays
    with the process. Process-wide (the last call's bound holds); returns False where glibc's
    mallopt is not available.
    """
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = getattr(libc, "mallopt", None)
    except OSError:
        mallopt = None
    if mallopt is None:
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)  # glibc's maximum on 64-bit
    ok &= mallopt(_M_TRIM_THRESHOLD, int(keep_bytes))
    ok &= mallopt(_M_TOP_PAD, min(64 * 2**20, int(keep_bytes)))
    ok &= mallopt(_M_MMAP_MAX, 0)  # joined multi-frame tensors (> 32 MiB) from the heap too
    return bool(ok)


class _Client:
    """ZAP credentials check: only the run's client public key may connect."""

    def __init__(self, allowed: bytes) -> None:
        self.allowed = allowed

    def callback(self, domain: str, key: bytes) -> bool:
        ok = key == self.allowed
        if not ok:
            log.warning("refused a CURVE client with an unknown key")
        return ok


_lock = threading.Lock()
# One ZAP authenticator per context, shared by its server sockets and stopped with the last.
_auth: dict[int, tuple[ThreadAuthenticator, int]] = {}


def _zap_domain(keys: CurveKeys) -> str:
    """The ZAP domain of a run's server sockets: each run's sockets accept only its client key."""
    return "edgetrain-" + keys.client_public.decode("ascii")


def _acquire_auth(ctx: zmq.SyncContext, keys: CurveKeys) -> None:
    with _lock:
        auth, users = _auth.get(id(ctx), (None, 0))
        if auth is None or auth.context is not ctx:  # (the entry holds its context: no reuse)
            users = 0
            auth = ThreadAuthenticator(ctx, log=logging.getLogger("edgetrain.zap"))
            auth.start()
        auth.configure_curve_callback(_zap_domain(keys), _Client(keys.client_public))
        _auth[id(ctx)] = (auth, users + 1)


def _release_auth(ctx: zmq.SyncContext) -> None:
    with _lock:
        auth, users = _auth.get(id(ctx), (None, 0))
        if auth is None:
            return
        if users > 1:
            _auth[id(ctx)] = (auth, users - 1)
            return
        del _auth[id(ctx)]
    auth.stop()


class ServerSocket(zmq.Socket):  # type: ignore[type-arg]
    """A binding socket that releases its context's authenticator when closed."""

    _guarded = False

    def close(self, linger: int | None = None) -> None:
        ctx = self.context
        super().close(linger)
        if self._guarded:
            self._guarded = False
            _release_auth(ctx)


def server(
    ctx: zmq.SyncContext,
    kind: int,
    keys: CurveKeys | None = None,
    opts: SocketOptions = DEFAULT,
) -> zmq.SyncSocket:
    """A socket that binds (ROUTER, PULL); with ``keys``, a CURVE server checking client keys."""
    sock: Any = ctx.socket(kind, socket_class=ServerSocket)
    _apply(sock, opts)
    if keys is not None:
        _acquire_auth(ctx, keys)
        sock._guarded = True
        sock.setsockopt(zmq.ZAP_DOMAIN, _zap_domain(keys).encode())
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, keys.server_secret)
    return sock  # type: ignore[no-any-return]


def client(
    ctx: zmq.SyncContext,
    kind: int,
    keys: CurveKeys | None = None,
    opts: SocketOptions = DEFAULT,
    identity: bytes | None = None,
) -> zmq.SyncSocket:
    """A socket that connects (DEALER, PUSH); with ``keys``, a CURVE client of the run."""
    sock = ctx.socket(kind)
    _apply(sock, opts)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    if keys is not None:
        sock.setsockopt(zmq.CURVE_SERVERKEY, keys.server_public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.client_public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, keys.client_secret)
    return sock
