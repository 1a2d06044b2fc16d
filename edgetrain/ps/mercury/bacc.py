"""The BACC scheduler's hand-off between a device's two threads (specs/ps.md §2.5).

Thread 1 (T1) runs distributed SGD: sample, compute, aggregate, step. Thread 2 (T2) refreshes
importance and reshards data. Two pairs overlap:

- **importance refresh overlaps aggregation** (compute idle, network busy): while T1's
  aggregation of iteration t is active, T2 refreshes chunks of samples; everything refreshed
  in that window is one cohort stamped t, so the group size is "what fits in the aggregation
  time" by construction (``anytime``). At least one chunk per iteration, so a fast link still
  refreshes something. With a count (``predict`` or a fixed G) T2 refreshes exactly that
  many, and T1 waits for it if it overruns.
- **resharding overlaps computation** (network idle): outside aggregation T2 sends swap
  chunks, checking before each one; the next aggregation pauses it (breakpoint-resume), so
  the pause waits at most for the chunk in flight. The bandwidth-agnostic variant reshards
  for a fixed slot per iteration whether aggregation runs or not.

T1 ends its aggregation and then waits until T2 stands still (no refresh chunk running, the
iteration's refresh done) before its optimiser step: T2 reads the weights. That wait, and the
pause latency, are measured. :class:`Protocol` is the pure state machine (times are passed
in); :class:`Handoff` wraps it with a condition variable for the two threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

REFRESH = "refresh"
SWAP = "swap"
WAIT = "wait"
STOP = "stop"


@dataclass(frozen=True)
class Action:
    """What T2 does next: refresh a chunk for ``iteration``, send one swap chunk, wait, stop."""

    kind: str
    iteration: int = -1


@dataclass
class Stats:
    """What the hand-offs cost, cumulative (seconds; samples)."""

    step_wait_s: float = 0.0  # T1 waiting for T2 to stand still before its step
    step_waits: int = 0
    pause_latency_s: float = 0.0  # aggregation start -> the swap chunk in flight done
    pause_latency_max_s: float = 0.0
    pauses: int = 0
    refreshed: int = 0
    refresh_s: float = 0.0
    swaps: int = 0
    swap_s: float = 0.0
    cohorts: list[int] = field(default_factory=list)  # samples refreshed per iteration


class Protocol:
    """The hand-off state of one device. Pure: every call passes the time it happens at.

    ``anytime``: T2 refreshes while the aggregation lasts (at least one chunk); otherwise T1
    sets a count per iteration (:meth:`begin_aggregation`). ``pause_swaps``: resharding stops
    while aggregation runs (BACC); False: a fixed slot of ``slot_s`` per iteration
    (bandwidth-agnostic). ``refresh``: whether T2 refreshes at all (All-IS and uniform
    sampling do not)."""

    def __init__(
        self, anytime: bool = True, pause_swaps: bool = True, slot_s: float = 0.0,
        refresh: bool = True,
    ) -> None:  # fmt: skip
        self.anytime = anytime
        self.pause_swaps = pause_swaps
        self.slot_s = slot_s
        self.refresh = refresh
        self.agg: int | None = None  # the iteration whose aggregation is active
        self.iteration = -1  # the iteration T2 refreshes for
        self.target = 0  # samples to refresh this iteration (count mode)
        self.done_samples = 0  # refreshed so far this iteration
        self.refreshing = False
        self.swapping = False
        self.swap_work = False  # the device has swap chunks to send
        self.held = False  # resharding held (evaluation, barrier)
        self.stopped = False
        self.slot_left = 0.0  # agnostic: resharding time left in this iteration
        self._agg_started = 0.0
        self._pause_from: float | None = None
        self._busy_since = 0.0
        self._end_at: float | None = None
        self.stats = Stats()

    # ------------------------------------------------------------------ T1

    def begin_aggregation(self, t: int, now: float, target: int = 0) -> None:
        """T1 sends its first gradient slice of iteration ``t``; ``target``: the samples T2
        must refresh this iteration (count mode)."""
        self.agg = t
        self.iteration = t
        self.target = target
        self.done_samples = 0
        self._agg_started = now
        self._end_at = None
        self.slot_left = self.slot_s
        if self.swapping and self.pause_swaps:
            self._pause_from = now

    def end_aggregation(self, t: int, now: float) -> None:
        """The last averaged slice of iteration ``t`` arrived."""
        if self.agg == t:
            self.agg = None
            self._end_at = now

    def refresh_satisfied(self) -> bool:
        if not self.refresh or self.iteration < 0:
            return True
        if self.anytime:
            return self.done_samples > 0
        return self.done_samples >= self.target

    def may_step(self) -> bool:
        """T1 may take its optimiser step: T2 is not reading the weights and the iteration's
        refresh is done."""
        return self.agg is None and not self.refreshing and self.refresh_satisfied()

    def stepped(self, now: float) -> None:
        """T1 took its step (the wait since the aggregation ended is recorded)."""
        if self._end_at is not None:
            self.stats.step_wait_s += max(0.0, now - self._end_at)
            self.stats.step_waits += 1
            self._end_at = None
        if self.refresh and self.iteration >= 0:
            self.stats.cohorts.append(self.done_samples)

    # ------------------------------------------------------------------ T2

    def next_action(self) -> Action:
        """What T2 should do now."""
        if self.stopped:
            return Action(STOP)
        if self.refreshing or self.swapping:  # T2 is busy with one already
            return Action(WAIT)
        if self.refresh and self.iteration >= 0:
            if self.anytime and (self.agg is not None or self.done_samples == 0):
                return Action(REFRESH, self.iteration)
            if not self.anytime and self.done_samples < self.target:
                return Action(REFRESH, self.iteration)
        if self.swap_work and not self.held:
            if self.pause_swaps and self.agg is None:
                return Action(SWAP)
            if not self.pause_swaps and self.slot_left > 0 and self.refresh_satisfied():
                return Action(SWAP)
        return Action(WAIT)

    def started(self, action: Action, now: float) -> None:
        self._busy_since = now
        if action.kind == REFRESH:
            self.refreshing = True
        elif action.kind == SWAP:
            self.swapping = True

    def finished(self, action: Action, now: float, samples: int = 0) -> None:
        took = max(0.0, now - self._busy_since)
        if action.kind == REFRESH:
            self.refreshing = False
            if action.iteration == self.iteration:
                self.done_samples += samples
            self.stats.refreshed += samples
            self.stats.refresh_s += took
        elif action.kind == SWAP:
            self.swapping = False
            self.stats.swaps += 1
            self.stats.swap_s += took
            self.slot_left -= took
            if self._pause_from is not None:
                latency = max(0.0, now - self._pause_from)
                self.stats.pause_latency_s += latency
                self.stats.pause_latency_max_s = max(self.stats.pause_latency_max_s, latency)
                self.stats.pauses += 1
                self._pause_from = None


class Handoff:
    """:class:`Protocol` shared by T1 and T2 under one condition variable."""

    def __init__(self, protocol: Protocol, clock: Callable[[], float] = time.monotonic) -> None:
        self.p = protocol
        self.clock = clock
        self.cond = threading.Condition()

    def begin(self, t: int, target: int = 0) -> None:
        with self.cond:
            self.p.begin_aggregation(t, self.clock(), target)
            self.cond.notify_all()

    def end(self, t: int) -> None:
        with self.cond:
            self.p.end_aggregation(t, self.clock())
            self.cond.notify_all()

    def wait_step(self, timeout: float | None = None) -> bool:
        """T1: wait until it may step (False on timeout or stop); records the wait."""
        with self.cond:
            ok = self.cond.wait_for(lambda: self.p.may_step() or self.p.stopped, timeout)
            if ok and not self.p.stopped:
                self.p.stepped(self.clock())
            return bool(ok) and not self.p.stopped

    def next(self, timeout: float | None = None) -> Action:
        """T2: block until there is something to do (WAIT only on timeout); it is started."""
        with self.cond:
            self.cond.wait_for(lambda: self.p.next_action().kind != WAIT, timeout)
            action = self.p.next_action()
            if action.kind in (REFRESH, SWAP):
                self.p.started(action, self.clock())
            return action

    def finished(self, action: Action, samples: int = 0) -> None:
        with self.cond:
            self.p.finished(action, self.clock(), samples)
            self.cond.notify_all()

    def set_swap_work(self, pending: bool) -> None:
        with self.cond:
            self.p.swap_work = pending
            self.cond.notify_all()

    def hold(self, held: bool) -> None:
        """Hold resharding (evaluation, barriers: outside the training clock) or resume it."""
        with self.cond:
            self.p.held = held
            self.cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Until T2 has nothing running (neither a refresh chunk nor a swap chunk)."""
        with self.cond:
            return self.cond.wait_for(lambda: not (self.p.refreshing or self.p.swapping), timeout)

    def stop(self) -> None:
        with self.cond:
            self.p.stopped = True
            self.cond.notify_all()
