"""The BACC hand-off between a device's two threads, driven by a fake clock (specs/ps.md §2.5):
the anytime refresh fills exactly the aggregation window (at least one chunk), resharding
pauses when aggregation starts and resumes after (breakpoint-resume), the step waits for T2
to stand still; the bandwidth-agnostic variant refreshes a fixed count and reshards in a
fixed slot whatever the aggregation does."""

from __future__ import annotations

import threading

import pytest

from edgetrain.ps.mercury.bacc import REFRESH, STOP, SWAP, WAIT, Action, Handoff, Protocol


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(p: Protocol, kind: str, start: float, end: float, samples: int = 0) -> None:
    """T2 takes its next action (which must be ``kind``) from ``start`` to ``end``."""
    action = p.next_action()
    assert action.kind == kind, action
    p.started(action, start)
    p.finished(action, end, samples)


def test_the_anytime_refresh_fills_the_aggregation_window() -> None:
    p = Protocol()
    assert p.next_action() == Action(WAIT)  # nothing before the first aggregation
    p.begin_aggregation(0, 0.00)
    assert p.next_action() == Action(REFRESH, 0)
    _run(p, REFRESH, 0.00, 0.03, 32)
    action = p.next_action()
    assert action == Action(REFRESH, 0)  # still aggregating: another chunk
    p.started(action, 0.03)
    p.end_aggregation(0, 0.05)  # the averaged gradient is in, a chunk is running
    assert not p.may_step()  # T2 reads the weights: T1 waits
    p.finished(action, 0.06, 32)
    assert p.may_step()
    p.stepped(0.06)
    assert p.stats.cohorts == [64] and p.stats.step_wait_s == pytest.approx(0.01)
    assert p.next_action() == Action(WAIT)  # the cohort of iteration 0 is closed


def test_a_fast_link_still_refreshes_one_chunk() -> None:
    p = Protocol()
    p.begin_aggregation(1, 1.000)
    p.end_aggregation(1, 1.001)  # before T2 even woke
    assert not p.may_step()
    _run(p, REFRESH, 1.001, 1.010, 32)  # the minimum of one chunk
    assert p.may_step() and p.next_action() == Action(WAIT)
    p.stepped(1.010)
    assert p.stats.step_wait_s == pytest.approx(0.009)


def test_resharding_pauses_at_aggregation_and_resumes_after() -> None:
    p = Protocol()
    p.swap_work = True
    assert p.next_action() == Action(SWAP)  # compute phase: the network is free
    swap = p.next_action()
    p.started(swap, 2.00)
    p.begin_aggregation(2, 2.01)  # T1 sends its gradient: the swap in flight must end first
    assert p.next_action() == Action(WAIT)  # busy until the chunk in flight is done
    p.finished(swap, 2.04)
    assert p.stats.pause_latency_max_s == pytest.approx(0.03) and p.stats.pauses == 1
    assert p.next_action() == Action(REFRESH, 2)  # paused: refresh, not swap
    _run(p, REFRESH, 2.04, 2.06, 32)
    p.end_aggregation(2, 2.07)
    assert p.next_action() == Action(SWAP)  # resumed where it stopped
    assert p.may_step()
    p.held = True  # evaluation and barriers are not training time
    assert p.next_action() == Action(WAIT)
    p.held = False
    p.swap_work = False
    assert p.next_action() == Action(WAIT)
    p.stopped = True
    assert p.next_action() == Action(STOP)


def test_the_bandwidth_agnostic_variant_ignores_the_aggregation() -> None:
    p = Protocol(anytime=False, pause_swaps=False, slot_s=0.05)
    p.swap_work = True
    p.begin_aggregation(0, 0.0, target=64)
    _run(p, REFRESH, 0.00, 0.02, 32)
    p.end_aggregation(0, 0.01)
    assert not p.may_step()  # a fixed group: T1 waits for all of it
    _run(p, REFRESH, 0.02, 0.04, 32)
    assert p.may_step()
    _run(p, SWAP, 0.04, 0.07)  # resharding whether or not aggregation runs
    assert p.next_action() == Action(SWAP)  # 0.02 s of the slot left
    _run(p, SWAP, 0.07, 0.10)
    assert p.next_action() == Action(WAIT)  # the slot is spent
    p.begin_aggregation(1, 0.2, target=64)
    assert p.next_action() == Action(REFRESH, 1)
    _run(p, REFRESH, 0.2, 0.21, 64)
    assert p.next_action() == Action(SWAP)  # during aggregation: the slot ignores it


@pytest.mark.timeout(30)
def test_two_threads_hand_off_through_the_condition() -> None:
    """T1 and T2 as real threads; the clock is fake, the order is forced by events."""
    clock = FakeClock()
    h = Handoff(Protocol(), clock)
    chunk_started = threading.Event()
    release_chunk = threading.Event()
    refreshed: list[int] = []

    def t2() -> None:
        while True:
            action = h.next(timeout=5)
            if action.kind == STOP:
                return
            if action.kind == REFRESH:
                chunk_started.set()
                assert release_chunk.wait(5)
                refreshed.append(action.iteration)
                h.finished(action, 32)

    thread = threading.Thread(target=t2, daemon=True)
    thread.start()
    try:
        h.begin(0)
        assert chunk_started.wait(5)
        clock.now = 0.5
        h.end(0)
        assert not h.wait_step(timeout=0.05)  # T2 is inside a chunk: no step yet
        clock.now = 0.8
        release_chunk.set()
        assert h.wait_step(timeout=5)
        assert refreshed == [0] and h.p.stats.cohorts == [32]
        assert h.p.stats.step_wait_s == pytest.approx(0.3)  # 0.5 -> 0.8 on the fake clock
    finally:
        h.stop()
        thread.join(5)
    assert not thread.is_alive()


def test_pace_delay_literals() -> None:
    from edgetrain.ps.mercury.bacc import pace_delay

    # 0.02 s of CPU in 0.03 s of wall on a 0.5-core share: one more 0.01 s chunk fits at 0.06 s
    assert pace_delay(0.02, 0.03, 0.5, 0.01) == pytest.approx(0.03)
    assert pace_delay(0.02, 0.06, 0.5, 0.01) == 0.0
    assert pace_delay(0.0, 0.0, 2.0, 0.01) == pytest.approx(0.005)  # idle cores: barely
    assert pace_delay(5.0, 0.0, 0.0, 1.0) == 0.0  # no share: unpaced


def test_optional_refresh_is_paced_by_the_cpu_the_process_has_left() -> None:
    """On a 0.5-core device, the first chunk of an iteration goes at once; one more waits
    until the process's CPU time since the iteration began, plus a chunk's, fits in half the
    wall time since then. The aggregation's end stops the refresh, paced or not."""
    wall, cpu = FakeClock(), FakeClock()
    h = Handoff(Protocol(), wall, share=0.5, cpu_clock=cpu)
    h.mark()
    wall.now, cpu.now = 0.02, 0.01
    h.begin(0)
    first = h.next(timeout=0)
    assert first == Action(REFRESH, 0)  # the iteration's first chunk: never paced
    wall.now, cpu.now = 0.03, 0.02
    h.finished(first, 32, cpu_s=0.01)
    assert h.next(timeout=0) == Action(WAIT)  # (0.02 + 0.01) / 0.5 = 0.06 > 0.03 s
    wall.now = 0.06
    assert h.next(timeout=0) == Action(REFRESH, 0)  # the CPU T1 left: one more chunk
    wall.now, cpu.now = 0.07, 0.03
    h.finished(Action(REFRESH, 0), 32, cpu_s=0.01)
    h.end(0)
    assert h.next(timeout=0) == Action(WAIT)  # aggregation over: nothing optional left
    assert h.wait_step(timeout=0) and h.p.stats.cohorts == [64]
    unpaced = Handoff(Protocol(), wall, share=None, cpu_clock=cpu)
    unpaced.begin(1)
    unpaced.finished(unpaced.next(timeout=0), 32, cpu_s=1.0)
    assert unpaced.next(timeout=0) == Action(REFRESH, 1)  # the paper's BACC: no pacing


def test_an_anytime_refresh_scores_each_sample_at_most_once_per_iteration() -> None:
    p = Protocol(limit=64)  # a device of 64 samples, a long aggregation
    p.begin_aggregation(0, 0.0)
    _run(p, REFRESH, 0.00, 0.01, 32)
    assert p.room() == 32
    _run(p, REFRESH, 0.01, 0.02, 32)
    assert p.room() == 0 and p.next_action() == Action(WAIT)  # still aggregating: no more
    p.end_aggregation(0, 0.05)
    assert p.may_step()
    p.stepped(0.05)
    assert p.stats.cohorts == [64]
    assert Protocol().room() > 1 << 40  # no limit given


def test_a_batch_that_rescored_its_samples_makes_every_refresh_optional() -> None:
    """``batch_refresh``: the batch's own losses rescored its samples (``scored``), so T1 may
    step at once and a paced T2 refreshes only with the CPU T1 leaves; the cohorts count
    what T2 refreshed (the batch's samples keep their stamps)."""
    wall, cpu = FakeClock(), FakeClock()
    h = Handoff(Protocol(), wall, share=0.5, cpu_clock=cpu)
    h.mark()
    wall.now, cpu.now = 0.02, 0.02  # the compute took the whole share
    h.begin(0, scored=True)
    assert h.p.optional_refresh() and h.p.refresh_satisfied()
    assert h.next(timeout=0) == Action(WAIT)  # (0.02 + 0) / 0.5 = 0.04 > 0.02 s: no chunk
    wall.now = 0.05
    assert h.next(timeout=0) == Action(REFRESH, 0)  # the aggregation left CPU idle: one chunk
    h.finished(Action(REFRESH, 0), 32, cpu_s=0.005)
    h.end(0)
    assert h.wait_step(timeout=0) and h.p.stats.cohorts == [32]
    h.begin(1, scored=True)
    h.end(1)
    assert h.wait_step(timeout=0) and h.p.stats.cohorts == [32, 0]  # nothing waited for T2
    h.begin(2)  # not rescored: the first chunk is due again, and T1 waits for it
    assert not h.p.refresh_satisfied() and h.next(timeout=0) == Action(REFRESH, 2)
