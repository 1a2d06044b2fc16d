"""Slow-device emulation for any role: after each piece of work, sleep (s - 1) times its time."""

from __future__ import annotations

import time


class Throttle:
    """A worker's ``slowdown`` s >= 1: each unit of work is followed by (s - 1) x its duration.

    The sleep is invisible to a /proc-based load monitor (a sleeping worker looks idle), so
    techniques that predict speed from contention (EdgeGossip) need cgroup CPU shares
    (``edgetrain emulate``) or co-running load instead; see the recipe reference."""

    def __init__(self, slowdown: float = 1.0) -> None:
        self.slowdown = slowdown
        self.slept_s = 0.0

    def after(self, work_s: float) -> float:
        """Sleep for the work just done; returns the seconds slept."""
        if self.slowdown <= 1.0:
            return 0.0
        pause = (self.slowdown - 1.0) * work_s
        time.sleep(pause)
        self.slept_s += pause
        return pause
