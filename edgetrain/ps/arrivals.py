"""A trainer's transmissions as logged (:class:`Transmission`), and the link's time on each
as the link delivered them. Pure.

The transmitter applies answers in the order it asked for them, so the time it logs for a
transmission (from the end of the one before it to its own end, :mod:`.transmitter`) is the
link's only when answers come in that order. Under BSP they need not: every pull of an
iteration waits at its shard for its layers' new version, the versions come in the order the
slowest trainer pushed them (the last layer first), and the first layer's pull, which leads the
burst, is let go last. Its answer then ends the burst and every other pull, in long before,
is logged at almost nothing: a 300 Mbit/s link read at several GB/s (issue 28).

So the link's time is read from when each answer came in (``arrived``), a burst's
transmissions in the order they came: each from when the link was free for it (the one before
it in arrival order had come in) or, if later, from the earliest its answer could have begun to
come, its request's send time plus the shard's hold (``held_s``, counted from when the request
reached the shard) plus the round trip; to when it came in. With the round trip unknown (0),
the first to arrive in a burst takes that round trip, which is how :mod:`.latency` reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Transmission:
    """One pull or push of one segment, as it happened (``time.perf_counter`` seconds)."""

    direction: str  # pull | push
    iteration: int
    segment: int  # 1-based, in the phase's order
    nbytes: int
    start: float  # when the link began on it: ``sent``, or the end of the one it followed
    end: float  # when its last answer was applied
    held_s: float
    sent: float  # when its requests went out
    lead: bool  # nothing of its direction was in flight when it was sent: it paid a round trip
    arrived: float  # when its last answer came in (applied at ``end``, in request order)

    @property
    def seconds(self) -> float:
        return self.end - self.start


def link_samples(rows: Sequence[Transmission], rtt: float = 0.0) -> list[tuple[int, float, bool]]:
    """``(bytes, seconds, first)`` of ``rows`` (one direction, in the order sent), burst by
    burst, each burst in the order its answers came in; ``first`` marks the first of a burst
    to come in, whose time, with ``rtt`` 0, holds the round trip. Rows before the first
    leader (their leader fell out of the window) are left out."""
    out: list[tuple[int, float, bool]] = []
    burst: list[Transmission] = []

    def flush() -> None:
        came: float | None = None
        for t in sorted(burst, key=lambda t: t.arrived):
            floor = t.sent + t.held_s + rtt
            start = floor if came is None else max(came, floor)
            out.append((t.nbytes, max(0.0, t.arrived - start), came is None))
            came = t.arrived

    for row in rows:
        if row.lead:
            flush()
            burst = [row]
        elif burst:
            burst.append(row)
    flush()
    return out
