"""A Mercury device's peer traffic: one thread that owns every socket to the other devices.

The device's shard server lives here: its ROUTER takes the peers' ``mc.grad`` slices of the
slice it owns, averages each iteration once all K are in (device order, weighted by local
dataset size; :mod:`.shards`) and sends the average back to every peer; it also answers the
peers' ``mc.swap`` chunks through the device's swap server. The device's own requests go out
on one DEALER per peer: its gradient slices (answered by the owner's average) and its swap
chunks (answered by the peer's samples). The training thread and the resharding thread hand
work in through a queue and a wake-up pipe (ZeroMQ sockets are not shared between threads)
and wait on events. Every message received is validated (:mod:`.messages`, :mod:`.codec`);
nothing is unpickled.

In a run that rewinds (``[run] restart``), every message carries the device's generation
(``gen``, the rewinds so far) and one of another generation is dropped (``stale``): a rewound
device starts a new thread on the same ROUTER, and what the old generation left in it never
reaches the new one.

Device 0 also checks the replicas: every ``hash_every`` iterations each device's slice to
device 0 carries a 64-bit hash of its weights; a device whose hash differs from device 0's
stops the run with a line naming it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from edgetrain.comm.rewind import GEN, gen_of
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Message
from edgetrain.errors import RunError
from edgetrain.ps.mercury import messages
from edgetrain.ps.mercury.shards import Averager, diverged, naming

log = logging.getLogger(__name__)

# The swap server's answer to a chunk: tensors and meta, or None (not ready: ask again later).
SwapAnswer = tuple[dict[str, np.ndarray], dict[str, Any]]
SwapServer = Callable[[int, Message], SwapAnswer | None]
# Why a chunk's arrays are unusable, or None (:meth:`.codec.SampleCodec.check` with its limit).
SwapCheck = Callable[[Mapping[str, np.ndarray]], str | None]
WAIT_SLICE_S = 0.1  # how often a wait for an average looks up from it


@dataclass
class _Result:
    """The averaged gradient of one iteration as its slices arrive."""

    flat: np.ndarray
    missing: set[int]
    done: threading.Event = field(default_factory=threading.Event)
    pushed_at: float = 0.0


@dataclass
class _Swap:
    """One swap chunk waiting for its answer."""

    peer: int
    round: int
    seq: int
    done: threading.Event = field(default_factory=threading.Event)
    answer: Message | None = None


@dataclass
class NetStats:
    grad_bytes: int = 0
    swap_bytes_sent: int = 0
    swap_bytes_received: int = 0
    swaps_served: int = 0
    hash_checks: int = 0


class Net(threading.Thread):
    """The peer-traffic thread of device ``me`` of ``K``."""

    def __init__(
        self,
        *,
        transport: Transport,
        router: zmq.SyncSocket,
        me: int,
        names: Mapping[int, str],
        endpoints: Mapping[int, str],
        bounds: list[tuple[int, int]],
        weights: np.ndarray,
        timeout_s: float,
        codec: str,
        swap_check: SwapCheck,
        swap_server: SwapServer,
        first_iteration: int = 0,
        gen: int = 0,
    ) -> None:
        super().__init__(daemon=True, name="mercury-net")
        self.transport = transport
        self.traffic = transport.traffic
        self.router = router
        self.me = me
        self.names = dict(names)  # device -> worker name (its socket identity)
        self.by_name = {v: k for k, v in self.names.items()}
        self.endpoints = dict(endpoints)
        self.bounds = bounds
        self.width = bounds[-1][1]
        self.timeout_s = timeout_s
        self.codec = codec
        self.swap_check = swap_check
        self.swap_server = swap_server
        self.gen = gen
        lo, hi = bounds[me]
        self.averager = Averager(weights, hi - lo, first_iteration)
        self.stats = NetStats()
        self.error: str | None = None
        self._commands: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._wake_r, self._wake_w = os.pipe()
        self._results: dict[int, _Result] = {}
        self._swaps: dict[tuple[int, int, int], _Swap] = {}
        self._parked: list[tuple[bytes, int, Message]] = []
        self._hashes: dict[int, dict[int, str]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.dealers: dict[int, zmq.SyncSocket] = {}

    # ------------------------------------------------------------------ other threads

    def _command(self, *cmd: Any) -> None:
        self._commands.put(cmd)
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def push(self, t: int, grad: np.ndarray, weights_hash: str | None) -> None:
        """Send iteration ``t``'s local gradient (flat float32) to the shard owners."""
        result = _Result(np.empty(self.width, dtype=np.float32), set(self.names))
        result.pushed_at = time.monotonic()
        with self._lock:
            self._results[t] = result
        self._command("push", t, grad, weights_hash)

    def wait_average(self, t: int, poll: Callable[[], None] | None = None) -> np.ndarray:
        """The averaged gradient of iteration ``t``, or :class:`RunError` naming the devices
        that did not answer (or what diverged). ``poll`` runs while it waits (the control
        plane: a lost device may rewind the run, see :mod:`edgetrain.comm.rewind`)."""
        with self._lock:
            result = self._results[t]
        deadline = time.monotonic() + self.timeout_s
        while not result.done.wait(WAIT_SLICE_S):
            if poll is not None:
                poll()
            if self.error is not None:
                raise RunError(self.error)
            if time.monotonic() > deadline or not self.is_alive():
                late = ", ".join(f"device {d}" for d in sorted(result.missing))
                raise RunError(
                    f"iteration {t}: no averaged gradient from {late} within {self.timeout_s:.0f} s"
                )
        if self.error is not None:
            raise RunError(self.error)
        with self._lock:
            del self._results[t]
        return result.flat

    def swap(self, peer: int, round_: int, seq: int, tensors: dict[str, np.ndarray]) -> Message:
        """Send a swap chunk to ``peer`` and wait for its answer (:class:`RunError` if none)."""
        pending = _Swap(peer, round_, seq)
        with self._lock:
            self._swaps[(peer, round_, seq)] = pending
        self._command("swap", pending, tensors)
        deadline = time.monotonic() + self.timeout_s
        while not pending.done.wait(0.5):
            if self.error is not None or self._stopping.is_set():
                raise RunError(self.error or "the device is stopping")
            if time.monotonic() > deadline:
                raise RunError(
                    f"device {peer} did not answer swap chunk {seq} of round {round_} within "
                    f"{self.timeout_s:.0f} s"
                )
        assert pending.answer is not None
        return pending.answer

    def retry_parked(self) -> None:
        """Ask the thread to serve swap chunks it parked (a new round's plan exists)."""
        self._command("retry")

    def stop(self) -> None:
        self._stopping.set()
        self._command("stop")
        self.join(timeout=10)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # ------------------------------------------------------------------ the thread

    def run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # noqa: BLE001 - the training thread reports it
            self.error = f"device {self.me}'s network thread failed: {type(exc).__name__}: {exc}"
            log.exception("mercury net thread")
        finally:
            for sock in self.dealers.values():
                sock.close(linger=0)
            for r in list(self._results.values()):
                r.done.set()

    def _loop(self) -> None:
        name = self.names[self.me]
        for k, endpoint in self.endpoints.items():
            if k == self.me:
                continue
            self.dealers[k] = self.transport.connect(zmq.DEALER, endpoint, identity=name)
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        for sock in self.dealers.values():
            poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        peer_of = {sock: k for k, sock in self.dealers.items()}
        while not self._stopping.is_set():
            ready = dict(poller.poll(1000))
            if self._wake_r in ready:
                with contextlib.suppress(OSError):
                    os.read(self._wake_r, 4096)
            if not self._run_commands():
                return
            if self.router in ready:
                self._serve_router()
            for sock, k in peer_of.items():
                if sock in ready:
                    self._serve_dealer(sock, k)

    def _run_commands(self) -> bool:
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return True
            if cmd[0] == "stop":
                return False
            if cmd[0] == "push":
                self._push(cmd[1], cmd[2], cmd[3])
            elif cmd[0] == "swap":
                self._send_swap(cmd[1], cmd[2])
            elif cmd[0] == "retry":
                parked, self._parked = self._parked, []
                for identity, peer, msg in parked:
                    self._answer_swap(identity, peer, msg)

    def _send(self, sock: zmq.SyncSocket, msg: Message, peer: int, identity: bytes | None) -> int:
        return self.transport.send(sock, msg, identity=identity, peer=self.names[peer])

    def _msg(self, kind: str, meta: dict[str, Any], tensors: dict[str, np.ndarray]) -> Message:
        stamped = {**meta, GEN: self.gen} if self.gen else meta
        return self.transport.message(kind, stamped, tensors)

    def _push(self, t: int, grad: np.ndarray, weights_hash: str | None) -> None:
        for k, (lo, hi) in enumerate(self.bounds):
            if k == self.me:
                continue
            meta: dict[str, Any] = {"iter": t, "lo": lo, "hi": hi}
            if weights_hash is not None and k == 0:
                meta["hash"] = weights_hash
            n = self._send(
                self.dealers[k], self._msg(messages.GRAD, meta, {"g": grad[lo:hi]}), k, None
            )
            self.stats.grad_bytes += n
        lo, hi = self.bounds[self.me]
        if weights_hash is not None and self.me == 0:
            self._hash(t, 0, weights_hash)
        self._slice(t, self.me, np.array(grad[lo:hi], dtype=np.float32, copy=True))

    def _slice(self, t: int, device: int, g: np.ndarray) -> None:
        reason = self.averager.add(t, device, g)
        if reason is not None:
            self.traffic.drop(reason, self.names.get(device))
            return
        while (mean := self.averager.ready()) is not None:
            done = self.averager.next - 1
            lo, hi = self.bounds[self.me]
            meta = {"iter": done, "lo": lo, "hi": hi}
            for k in self.dealers:
                msg = self._msg(messages.AVG, meta, {"g": mean})
                ident = self.names[k].encode()
                with contextlib.suppress(zmq.ZMQError):  # a lost peer: the control plane knows
                    self.stats.grad_bytes += self._send(self.router, msg, k, ident)
            self._part(done, self.me, mean)

    def _part(self, t: int, owner: int, g: np.ndarray) -> None:
        with self._lock:
            result = self._results.get(t)
        if result is None or owner not in result.missing:
            self.traffic.drop("unexpected_average", self.names.get(owner))
            return
        lo, hi = self.bounds[owner]
        result.flat[lo:hi] = g
        result.missing.discard(owner)
        if not result.missing:
            result.done.set()

    def _hash(self, t: int, device: int, value: str) -> None:
        got = self._hashes.setdefault(t, {})
        got[device] = value
        if len(got) == len(self.names):
            del self._hashes[t]
            self.stats.hash_checks += 1
            bad = diverged(got)
            if bad:
                self.error = (
                    f"replicas diverged at iteration {t}: {naming(bad)} other weights than "
                    f"device {min(got)} (hash {got[min(got)]})"
                )

    def _serve_router(self) -> None:
        while self.router.poll(0, zmq.POLLIN):
            got = self.transport.recv(self.router, messages.TO_OWNER, router=True)
            if got is None:
                continue
            identity, msg = got
            peer = self.by_name.get(msg.sender)
            if peer is None or peer == self.me or identity != msg.sender.encode():
                self.traffic.drop("unknown_device", msg.sender)
                continue
            if gen_of(msg.meta) != self.gen:  # sent before a rewind
                self.traffic.drop("stale", msg.sender)
                continue
            assert identity is not None
            if msg.type == messages.GRAD:
                reason = messages.slice_fields(msg.meta, msg.tensors, self.bounds[self.me])
                if reason is not None:
                    self.traffic.drop(reason, msg.sender)
                    continue
                t = int(msg.meta["iter"])
                if self.me == 0 and msg.meta.get("hash") is not None:
                    self._hash(t, peer, str(msg.meta["hash"]))
                self._slice(t, peer, msg.tensors["g"])
            else:
                self._answer_swap(identity, peer, msg)

    def _answer_swap(self, identity: bytes, peer: int, msg: Message) -> None:
        reason = messages.swap_fields(msg.meta, self.codec)
        if reason is None:
            reason = self.swap_check(msg.tensors)
        if reason is not None:
            self.traffic.drop(reason, msg.sender)
            return
        answer = self.swap_server(peer, msg)
        if answer is None:  # this device has not planned that round yet
            self._parked.append((identity, peer, msg))
            return
        tensors, meta = answer
        reply = self._msg(messages.SWAP_OK, meta, tensors)
        self.stats.swap_bytes_received += msg.tensor_bytes
        self.stats.swaps_served += 1
        with contextlib.suppress(zmq.ZMQError):
            self.stats.swap_bytes_sent += self._send(self.router, reply, peer, identity)

    def _send_swap(self, pending: _Swap, tensors: dict[str, np.ndarray]) -> None:
        meta = {"round": pending.round, "seq": pending.seq, "codec": self.codec}
        msg = self._msg(messages.SWAP, meta, tensors)
        self.stats.swap_bytes_sent += self._send(
            self.dealers[pending.peer], msg, pending.peer, None
        )

    def _serve_dealer(self, sock: zmq.SyncSocket, peer: int) -> None:
        while sock.poll(0, zmq.POLLIN):
            got = self.transport.recv(sock, messages.TO_DEVICE)
            if got is None:
                continue
            msg = got[1]
            if msg.sender != self.names[peer]:
                self.traffic.drop("unknown_device", msg.sender)
                continue
            if gen_of(msg.meta) != self.gen:
                self.traffic.drop("stale", msg.sender)
                continue
            if msg.type == messages.AVG:
                reason = messages.slice_fields(msg.meta, msg.tensors, self.bounds[peer])
                if reason is not None:
                    self.traffic.drop(reason, msg.sender)
                    continue
                self._part(int(msg.meta["iter"]), peer, msg.tensors["g"])
                continue
            reason = messages.swap_fields(msg.meta, self.codec) or self.swap_check(msg.tensors)
            key = (peer, msg.meta.get("round"), msg.meta.get("seq"))
            with self._lock:
                pending = self._swaps.pop(key, None) if reason is None else None  # type: ignore[arg-type]
            if pending is None:
                self.traffic.drop(reason or "unexpected_swap_answer", msg.sender)
                continue
            self.stats.swap_bytes_received += msg.tensor_bytes
            pending.answer = msg
            pending.done.set()
