"""What this worker process is doing now, for its heartbeats: its phase (``setup``,
``training``, ``draining``, ...) and, while it waits, on whom, for what, since when.

One process-wide record, set by the code that waits (the coordinator client's waits, a gossip
worker's wait for its peers' gradients, a pipeline stage's wait for its neighbour) and read by
the heartbeat thread, which sends it to the coordinator; the launcher writes what it hears to
``RUN/live/activity.json`` and ``edgetrain status RUN`` shows it per worker. Cheap: setting it
is a few assignments under a lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

ACTIVITY_JSON = "activity.json"  # in RUN/metrics/, written by the launcher
MAX_TEXT = 60  # characters of a phase, a peer or a what: a heartbeat stays small

_lock = threading.Lock()
_phase = "setup"
_wait: tuple[str, str, float] | None = None  # on whom, for what, since (monotonic)
_sending: tuple[int, float] | None = None  # bytes of the last bulk send, since (monotonic)
# A bulk send (a hand-in's weights) may hold its worker's link this long per byte: the time
# at this rate. The heartbeats wait behind it (on a 10 Mbit/s link, 23 MB take 19 s, and a
# full queue drops heartbeat packets so that TCP backs off), and so do its other messages to
# the coordinator; neither side takes that silence for a lost peer.
MIN_LINK_BPS = 1_000_000
# A message whose tensors are larger than this is announced before it is sent: a worker's in a
# heartbeat (:func:`sending`), the coordinator's in a ``state`` message ahead of it.
BULK_BYTES = 256 * 1024
MAX_BYTES = 10**13  # an announced bulk send this large or larger is not one (from the network)


def set_phase(name: str) -> None:
    """The process entered phase ``name`` (any wait ends, and the announcement of a bulk
    send: the coordinator keeps what it heard)."""
    global _phase, _wait, _sending
    with _lock:
        _phase, _wait, _sending = name[:MAX_TEXT], None, None


@contextmanager
def waiting(on: str, what: str) -> Iterator[None]:
    """While the block runs, this process waits on ``on`` (a worker, a stage, the
    coordinator) for ``what``; a wait inside another keeps the outer one's start."""
    global _wait
    with _lock:
        outer = _wait
        _wait = (on[:MAX_TEXT], what[:MAX_TEXT], outer[2] if outer else time.monotonic())
    try:
        yield
    finally:
        with _lock:
            _wait = outer


def sending(nbytes: int) -> None:
    """This process is about to send a bulk message of ``nbytes`` to the coordinator (a
    hand-in's weights). The heartbeats say so, with the seconds since, until the next bulk
    send or phase replaces it: on a slow link the heartbeats wait behind those bytes, and the
    coordinator allows them the time (:func:`transfer_s`)."""
    global _sending
    with _lock:
        _sending = (int(nbytes), time.monotonic())


def tensor_bytes(tensors: Mapping[str, Any]) -> int:
    """The bytes of a message's tensors (anything without ``nbytes`` counts 0). Pure."""
    return sum(int(getattr(t, "nbytes", 0)) for t in tensors.values())


def transfer_s(nbytes: int) -> float:
    """Seconds a bulk send of ``nbytes`` may take: its time at :data:`MIN_LINK_BPS`. Pure."""
    return nbytes * 8 / MIN_LINK_BPS


def snapshot(now: float | None = None) -> dict[str, Any]:
    """The record as a heartbeat carries it: ``{"phase", "on", "what", "for_s"}`` (the last
    three only while waiting), with ``"sending"`` and ``"sending_for_s"`` after a bulk send."""
    with _lock:
        phase, wait, bulk = _phase, _wait, _sending
    now = now or time.monotonic()
    out: dict[str, Any] = {"phase": phase}
    if wait is not None:
        on, what, since = wait
        out.update(on=on, what=what, for_s=round(now - since, 2))
    if bulk is not None:
        out.update(sending=bulk[0], sending_for_s=round(now - bulk[1], 2))
    return out


def parse(value: Any) -> dict[str, Any] | None:
    """A heartbeat's record as the coordinator keeps it, or None when it is not one (nothing
    from the network is trusted: strings cut to :data:`MAX_TEXT`, a finite wait)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("phase"), str):
        return None
    out: dict[str, Any] = {"phase": value["phase"][:MAX_TEXT]}
    on, what, for_s = value.get("on"), value.get("what"), _seconds(value.get("for_s"))
    if for_s is not None and isinstance(on, str) and isinstance(what, str):
        out.update(on=on[:MAX_TEXT], what=what[:MAX_TEXT], for_s=for_s)
    nbytes, sent_for = value.get("sending"), _seconds(value.get("sending_for_s"))
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        return out
    if sent_for is not None and 0 <= nbytes < MAX_BYTES:
        out.update(sending=nbytes, sending_for_s=sent_for)
    return out


def _seconds(value: Any) -> float | None:
    """``value`` as seconds when it is a non-negative number under 1e7 (not a bool; so
    finite), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 <= float(value) < 1e7 else None
