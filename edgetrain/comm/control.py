"""The control plane's contracts and its reliable delivery, as plain data and pure logic.

Contracts between the coordinator and a family: a process's :class:`Role`, an opaque
:class:`HandIn` (weights plus the family's metadata), the per-worker :class:`Decision` a
:class:`Controller` takes at start, at every epoch barrier and at drain, and the
:class:`CoordinationPolicy` that says which roles take part in epochs and which cannot be lost.

Reliable delivery: the coordinator numbers every message it sends a worker (``meta["seq"]``)
and keeps it in a :class:`ControlLog` until the worker acknowledges it (heartbeats carry the
highest number received in order); what stays unacknowledged for three heartbeat intervals is
sent again, and a worker that waits too long asks (``sync``) for everything after its last
number. The worker's :class:`InOrder` delivers each number once, in order, so resends and
duplicates are harmless. Nothing here touches a socket or a clock.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True, order=True)
class Role:
    """What one process does in a run (``trainer``, ``server``, ``stage``), and which one."""

    name: str
    index: int

    def __str__(self) -> str:
        return f"{self.name}:{self.index}"

    @classmethod
    def parse(cls, text: str) -> Role:
        """``"server:1"`` -> ``Role("server", 1)``; raises ValueError on anything else."""
        name, sep, index = text.partition(":")
        if not sep or not name or not index.isdigit() or len(text) > 64:
            raise ValueError(f"role {text!r} is not ROLE:INDEX (e.g. trainer:0)")
        return cls(name, int(index))


def assign_roles(names: list[str]) -> list[Role]:
    """Each worker's role with its index among the workers of the same role, in id order."""
    counts: dict[str, int] = {}
    roles = []
    for name in names:
        roles.append(Role(name, counts.get(name, 0)))
        counts[name] = counts.get(name, 0) + 1
    return roles


@dataclass(frozen=True)
class HandIn:
    """What a worker hands in at a checkpoint or at the end: arrays and the family's metadata.

    The coordinator checks only the framing (a JSON object, named arrays); what the metadata
    means, and whether the arrays fit the model, is the family's business."""

    weights: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Event:
    """Something that happened (``at``: time.monotonic() when it did), for the caller.

    ``worker`` is None for run-level events (the coordinator's own)."""

    worker: int | None
    kind: str
    data: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Decision:
    """What a controller decided: a directive per worker, or a halt with its one-line reason."""

    directives: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    halt: str | None = None

    def directive(self, worker: int) -> dict[str, Any]:
        return dict(self.directives.get(worker, {}))


class Controller(Protocol):
    """The launcher-side decisions of a family: pure functions of the workers' reports."""

    def on_start(self, ready: Mapping[int, Mapping[str, Any]]) -> Decision:
        """Once every worker is ready (``ready``: each one's ``ready`` report)."""
        ...

    def on_barrier(self, epoch: int, reports: Mapping[int, Mapping[str, Any]]) -> Decision:
        """Once every training worker has ended ``epoch`` (its ``epoch_end`` metrics)."""
        ...

    def on_drain(self, done: Mapping[int, Mapping[str, Any]]) -> Decision:
        """Once every training worker is done (its ``done`` report), and again whenever a
        worker fails while the others drain."""
        ...


class NoDirectives:
    """A controller that decides nothing: every directive is empty."""

    def on_start(self, ready: Mapping[int, Mapping[str, Any]]) -> Decision:
        return Decision()

    def on_barrier(self, epoch: int, reports: Mapping[int, Mapping[str, Any]]) -> Decision:
        return Decision()

    def on_drain(self, done: Mapping[int, Mapping[str, Any]]) -> Decision:
        return Decision()


@dataclass(frozen=True)
class CoordinationPolicy:
    """How the coordinator moves a family's workers through a run.

    ``epoch_roles`` train in epochs (``epoch_end``, ``done``); the others (parameter servers)
    run from ``start`` until ``drain``. ``barriers``: an epoch ends for all at once. Losing a
    worker of a ``fatal_roles`` role stops the run; losing any other follows
    ``[run] max_failed_fraction``. ``checkpoint_roles`` hand in a part of every checkpoint
    (None: every role). ``rewinds``: a lost epoch-role worker that comes back (``[run]
    restart``) takes every epoch-role worker back to the last checkpoint with it
    (:mod:`edgetrain.comm.rewind`; the pipeline family, whose stages cannot train around a
    lost one)."""

    epoch_roles: frozenset[str] = frozenset({"trainer"})
    barriers: bool = True
    fatal_roles: frozenset[str] = frozenset()
    checkpoint_roles: frozenset[str] | None = None
    rewinds: bool = False

    def checkpoints(self, role: str) -> bool:
        return self.checkpoint_roles is None or role in self.checkpoint_roles


# ------------------------------------------------------------------ reliable delivery


@dataclass
class Sent:
    """One numbered message to one worker, as the coordinator keeps it until acknowledged."""

    seq: int
    kind: str
    meta: dict[str, Any]
    epoch: int
    tensors: dict[str, np.ndarray]
    sent_at: float


class ControlLog:
    """Numbers the coordinator's messages per worker and keeps them until acknowledged."""

    def __init__(self, resend_after_s: float) -> None:
        self.resend_after_s = resend_after_s
        self._next: dict[int, int] = {}
        self._pending: dict[int, dict[int, Sent]] = {}
        self.resent = 0

    def record(
        self,
        worker: int,
        kind: str,
        meta: dict[str, Any],
        epoch: int,
        tensors: dict[str, np.ndarray],
        now: float,
    ) -> Sent:
        """Give the next number to a message for ``worker`` and keep it."""
        seq = self._next.get(worker, 0) + 1
        self._next[worker] = seq
        entry = Sent(seq, kind, {**meta, "seq": seq}, epoch, tensors, now)
        self._pending.setdefault(worker, {})[seq] = entry
        return entry

    def last(self, worker: int) -> int:
        """The number of the last message given to ``worker`` (0: none yet)."""
        return self._next.get(worker, 0)

    def ack(self, worker: int, seq: int) -> None:
        """``worker`` has received everything up to ``seq``: forget it."""
        pending = self._pending.get(worker, {})
        for n in [n for n in pending if n <= seq]:
            del pending[n]

    def after(self, worker: int, seq: int, now: float) -> list[Sent]:
        """Messages after ``seq`` still unacknowledged, in order, marked as sent ``now``."""
        out = [e for n, e in sorted(self._pending.get(worker, {}).items()) if n > seq]
        for e in out:
            e.sent_at = now
        return out

    def stale(self, now: float) -> list[tuple[int, Sent]]:
        """Unacknowledged messages last sent more than ``resend_after_s`` ago, marked as sent
        ``now``: the caller sends them again."""
        out: list[tuple[int, Sent]] = []
        for worker, pending in self._pending.items():
            for _, entry in sorted(pending.items()):
                if now - entry.sent_at > self.resend_after_s:
                    entry.sent_at = now
                    out.append((worker, entry))
        self.resent += len(out)
        return out

    def forget(self, worker: int) -> None:
        """Drop everything kept for ``worker`` (it failed)."""
        self._pending.pop(worker, None)

    def restart(self, worker: int) -> None:
        """Number ``worker``'s messages from 1 again: a new process of it (a rejoin) counts
        from scratch, and nothing kept for the old one is its business."""
        self._pending.pop(worker, None)
        self._next.pop(worker, None)

    def unacknowledged(self, worker: int) -> list[int]:
        return sorted(self._pending.get(worker, {}))


class InOrder:
    """A worker's receiving end: delivers numbered messages once each, in number order."""

    def __init__(self) -> None:
        self.delivered = 0  # the highest number delivered, all before it delivered too
        self._held: dict[int, Any] = {}

    def accept(self, seq: int, item: Any) -> list[Any]:
        """Take message ``seq``; return what can now be delivered (maybe nothing)."""
        if seq <= self.delivered or seq in self._held:
            return []  # a duplicate, or a resend of something already here
        self._held[seq] = item
        out = []
        while self.delivered + 1 in self._held:
            self.delivered += 1
            out.append(self._held.pop(self.delivered))
        return out

    @property
    def waiting(self) -> int:
        """Messages held back because one before them has not arrived."""
        return len(self._held)
