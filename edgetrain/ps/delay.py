"""An emulated one-way latency: actions due at a time, run in due order by the loop that owns
the sockets. Pure (the clock is passed in).

A parameter server with ``[ps] hold_ms = R`` emulates a link of round trip R: every message
it receives is handled R/2 after it arrived, and every reply leaves R/2 after it was made. Each
message carries its own due time, so a burst of requests sent together is answered together,
one round trip after it left, as over a real link: message i is never held behind message
i-1's delay (a sleep per message would add the delays up and serialise the burst). Actions due
at the same time run in the order they were added.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

IDLE_S = 3600.0  # what :meth:`DelayLine.run_due` returns when nothing is waiting


class DelayLine:
    """A timer heap: ``later(due, action)``; ``run_due(now)`` runs what is due."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], object]]] = []
        self._tick = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def later(self, due: float, action: Callable[[], object]) -> None:
        """Run ``action`` once the clock reaches ``due``."""
        heapq.heappush(self._heap, (due, next(self._tick), action))

    def run_due(self, now: float, final: bool = False) -> float:
        """Run every action due by ``now`` (every one, with ``final``), earliest first; return
        the seconds from ``now`` until the next one is due (:data:`IDLE_S` when none is).
        Actions may add more; those due by ``now`` run in this call too."""
        while self._heap and (final or self._heap[0][0] <= now):
            heapq.heappop(self._heap)[2]()
        if not self._heap:
            return IDLE_S
        return max(0.0, self._heap[0][0] - now)
