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

The premise of the first pair is a CPU left idle while the network works. On a device with
fewer cores than busy threads (an emulated host with a 0.45-core quota) it is false: T2's
refresh spends the quota T1 needs to receive and average, the group is throttled, and the
aggregation T2 was meant to hide in grows (T_cm 0.039 -> 0.091 s on ``mercury-4u``). With a
``share`` (the cores this device may use), an *optional* anytime refresh (beyond the first
chunk of the iteration) is therefore paced: it starts only once the process's CPU time since
the iteration began, plus one chunk's, fits in ``share`` times the wall time since then
(:func:`pace_delay`). Where cores are idle it never waits; where they are not, it refreshes
only with what T1 leaves.

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
    paced: int = 0  # optional refresh chunks deferred for want of CPU
    paced_s: float = 0.0  # time T2 spent deferring them


def pace_delay(cpu_s: float, wall_s: float, share: float, chunk_cpu_s: float) -> float:
    """Seconds until one more chunk (``chunk_cpu_s`` of CPU) keeps the process within
    ``share`` cores over the window: ``cpu_s`` of CPU used in ``wall_s`` so far. Pure."""
    if share <= 0:
        return 0.0
    return max(0.0, (cpu_s + chunk_cpu_s) / share - wall_s)


class Protocol:
    """The hand-off state of one device. Pure: every call passes the time it happens at.

    ``anytime``: T2 refreshes while the aggregation lasts (at least one chunk); otherwise T1
    sets a count per iteration (:meth:`begin_aggregation`). ``pause_swaps``: resharding stops
    while aggregation runs (BACC); False: a fixed slot of ``slot_s`` per iteration
    (bandwidth-agnostic). ``refresh``: whether T2 refreshes at all (All-IS and uniform
    sampling do not). ``limit``: the most samples an anytime refresh scores in one iteration
    (the local dataset: "whatever fits" never means a sample twice; 0: no limit)."""

    def __init__(
        self, anytime: bool = True, pause_swaps: bool = True, slot_s: float = 0.0,
        refresh: bool = True, limit: int = 0,
    ) -> None:  # fmt: skip
        self.anytime = anytime
        self.limit = limit
        self.pause_swaps = pause_swaps
        self.slot_s = slot_s
        self.refresh = refresh
        self.agg: int | None = None  # the iteration whose aggregation is active
        self.iteration = -1  # the iteration T2 refreshes for
        self.target = 0  # samples to refresh this iteration (count mode)
        self.done_samples = 0  # refreshed so far this iteration
        self.scored = False  # the batch rescored its samples this iteration (anytime)
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

    def begin_aggregation(self, t: int, now: float, target: int = 0, scored: bool = False) -> None:
        """T1 sends its first gradient slice of iteration ``t``; ``target``: the samples T2
        must refresh this iteration (count mode); ``scored``: the batch's own losses already
        rescored its samples, so an anytime refresh needs no first chunk (every chunk is
        optional)."""
        self.agg = t
        self.iteration = t
        self.target = target
        self.done_samples = 0
        self.scored = scored
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

    def room(self) -> int:
        """Samples an anytime refresh may still score this iteration (a large number: no
        limit)."""
        return self.limit - self.done_samples if self.limit > 0 else 1 << 62

    def optional_refresh(self) -> bool:
        """T2's next action would be an anytime refresh beyond the iteration's first chunk."""
        return self.anytime and (self.done_samples > 0 or self.scored)

    def refresh_satisfied(self) -> bool:
        if not self.refresh or self.iteration < 0:
            return True
        if self.anytime:
            return self.done_samples > 0 or self.scored
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
            if self.anytime and (
                (self.done_samples == 0 and not self.scored)
                or (self.agg is not None and self.room() > 0)
            ):
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
    """:class:`Protocol` shared by T1 and T2 under one condition variable.

    ``share``: the cores the device may use, for pacing optional refreshes (None: unpaced);
    ``cpu_clock``: the process's CPU time (every thread's)."""

    def __init__(
        self,
        protocol: Protocol,
        clock: Callable[[], float] = time.monotonic,
        share: float | None = None,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self.p = protocol
        self.clock = clock
        self.cond = threading.Condition()
        self.share = share
        self.cpu_clock = cpu_clock
        self.chunk_cpu_s = 0.0  # a refresh chunk's CPU time, as T2 last measured it
        self._window = (clock(), cpu_clock())  # (wall, CPU) when the iteration began

    def mark(self) -> None:
        """T1: an iteration begins (the pacing window's start)."""
        with self.cond:
            self._window = (self.clock(), self.cpu_clock())

    def begin(self, t: int, target: int = 0, scored: bool = False) -> None:
        with self.cond:
            self.p.begin_aggregation(t, self.clock(), target, scored)
            self.cond.notify_all()

    def _pace(self) -> float:
        """Seconds the next optional refresh must wait for CPU (0: go)."""
        if self.share is None or not self.p.optional_refresh():
            return 0.0
        wall0, cpu0 = self._window
        return pace_delay(
            self.cpu_clock() - cpu0, self.clock() - wall0, self.share, self.chunk_cpu_s
        )

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
        """T2: block until there is something to do (WAIT only on timeout); it is started.
        An optional refresh waits for CPU first (:func:`pace_delay`); anything else that
        becomes due meanwhile (the aggregation ends, a swap) is taken at once."""
        deadline = None if timeout is None else self.clock() + timeout
        with self.cond:
            while True:
                left = None if deadline is None else max(0.0, deadline - self.clock())
                self.cond.wait_for(lambda: self.p.next_action().kind != WAIT, left)
                action = self.p.next_action()
                if action.kind != REFRESH:
                    break
                delay = self._pace()
                if delay <= 0:
                    break
                left = None if deadline is None else deadline - self.clock()
                if left is not None and left <= 0:
                    return Action(WAIT)
                waited = self.clock()
                self.cond.wait(delay if left is None else min(delay, left))
                self.p.stats.paced += 1
                self.p.stats.paced_s += self.clock() - waited
            if action.kind in (REFRESH, SWAP):
                self.p.started(action, self.clock())
            return action

    def finished(self, action: Action, samples: int = 0, cpu_s: float | None = None) -> None:
        """T2 finished ``action``; ``cpu_s``: its CPU time (a refresh's sets the pace)."""
        with self.cond:
            self.p.finished(action, self.clock(), samples)
            if action.kind == REFRESH and cpu_s is not None and samples > 0:
                self.chunk_cpu_s = cpu_s
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
