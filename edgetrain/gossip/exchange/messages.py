"""The peer messages of the exchange techniques (DLion, Gaia, Ako) and what a worker waits for.

Messages travel on the ordinary wire format (JSON header, raw tensor frames, no pickle):

- ``grad``: a payload of a flat gradient-like vector (:mod:`.sparse`) with
  ``{"t", "origin", "loss", "m", "kind", "n", "offset"}`` in its meta; ``origin`` differs from
  the sender when a worker forwards a gradient to its site (selective propagation);
- ``grad_ack``: a few bytes back to the sender of a ``grad``, ``{"t", "fresh"}``, for the
  link's bandwidth estimate;
- ``weights``: a payload of flat weights, ``{"t", "kind", "n", "offset", "beta", "role"}``.

:class:`Expectations` is the iteration synchronisation (pure): the keys ``(type, origin, t)``
a worker waits for, messages that came before they were expected, and what still blocks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

GRAD = "grad"
ACK = "grad_ack"
WEIGHTS = "weights"
TYPES = (GRAD, ACK, WEIGHTS)

Key = tuple[str, int, int]  # (message type, origin worker, iteration)


def int_field(meta: dict[str, Any], key: str) -> int | None:
    value = meta.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def float_field(meta: dict[str, Any], key: str) -> float | None:
    value = meta.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


@dataclass(frozen=True)
class Header:
    """The checked fields of a ``grad`` or ``weights`` message's meta."""

    t: int
    origin: int
    loss: float | None
    m: int | None

    @classmethod
    def parse(cls, meta: dict[str, Any], default_origin: int) -> Header | None:
        t = int_field(meta, "t")
        origin = int_field(meta, "origin")
        if t is None:
            return None
        return cls(
            t,
            origin if origin is not None else default_origin,
            float_field(meta, "loss"),
            int_field(meta, "m"),
        )


class Expectations:
    """The messages a worker still waits for, by ``(type, origin, iteration)``."""

    def __init__(self) -> None:
        self.pending: set[Key] = set()
        self.early: set[Key] = set()  # arrived before anyone expected them

    def expect(self, keys: Iterable[Key]) -> None:
        for key in keys:
            if key in self.early:
                self.early.discard(key)
            else:
                self.pending.add(key)

    def arrived(self, key: Key) -> bool:
        """Record an arrival; True if it was awaited."""
        if key in self.pending:
            self.pending.discard(key)
            return True
        self.early.add(key)
        return False

    def blocking(self, upto: int) -> list[Key]:
        """What is still missing of iterations up to ``upto``, sorted."""
        return sorted(k for k in self.pending if k[2] <= upto)

    def forget_origin(self, origin: int) -> int:
        """Stop waiting for ``origin`` (it failed); returns how many were dropped."""
        gone = {k for k in self.pending if k[1] == origin}
        self.pending -= gone
        return len(gone)

    def give_up(self, keys: Iterable[Key]) -> None:
        self.pending -= set(keys)

    def prune(self, before: int) -> None:
        """Forget early arrivals of iterations before ``before`` (nobody will expect them)."""
        self.early = {k for k in self.early if k[2] >= before}
