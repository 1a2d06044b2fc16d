"""Where an exchange worker's CPU goes, part by part: the main thread's CPU time charged to the
innermost part running (a receive inside a send's wait is the receive's), so the parts add up
to the thread's time inside them. The cost model's calibration reads the loop's CPU besides the
gradient as one figure; these parts say what that figure is made of."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# The parts an exchange worker's iteration is cut into (docs/gossip.md, "Where the CPU goes").
PARTS = ("step", "sample", "gradient", "select", "send", "receive", "wait", "update", "weights")


class CpuParts:
    """Exclusive CPU time per named part of one thread (``clock``: that thread's CPU clock)."""

    def __init__(self, clock: Callable[[], float] = time.thread_time) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self._stack: list[str] = []
        self._since = 0.0

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        now = self.clock()
        if self._stack:
            self._charge(self._stack[-1], now)
        self._stack.append(name)
        self._since = now
        try:
            yield
        finally:
            now = self.clock()
            self._charge(self._stack.pop(), now)
            self._since = now

    def _charge(self, name: str, now: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, now - self._since)

    def as_dict(self) -> dict[str, float]:
        return dict(sorted(self.seconds.items()))
