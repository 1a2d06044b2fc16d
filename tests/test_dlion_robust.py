"""DLion's defences against a noisy start: the batch floor, a pilot repeated until stable and
measured one worker at a time, and the loss guard on a raised learning rate. Literal tables."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import pytest

from edgetrain.gossip.exchange.batching import plan_batches
from edgetrain.gossip.exchange.capacity import one_pilot_at_a_time, pilot
from edgetrain.gossip.exchange.controller import make_plan
from edgetrain.gossip.exchange.schedules import LossGuard

FAST = [(2, 2000.0), (16, 2000.0), (64, 2000.0)]
SLOW = [(2, 20.0), (16, 20.0), (64, 20.0)]  # a hundred times slower


def test_a_floor_keeps_a_slow_workers_batch_meaningful() -> None:
    free = plan_batches([FAST, FAST, FAST, SLOW], 16)
    assert free.batches == (21, 21, 21, 1)  # capacity alone: a one-sample gradient
    floored = plan_batches([FAST, FAST, FAST, SLOW], 16, minimum=4)
    assert floored.batches == (20, 20, 20, 4) and floored.total == 64
    # a floor the total cannot give every worker is lowered to what it can
    assert plan_batches([FAST, SLOW], 2, minimum=8).batches == (2, 2)


def test_dlions_plan_floors_at_a_quarter_of_b0_unless_told() -> None:
    from edgetrain.gossip.config import DLionSection

    curves = {0: FAST, 1: FAST, 2: FAST, 3: SLOW}
    plan = make_plan("dlion", DLionSection(), 16, curves, 1437)
    assert plan["batches"] == {"0": 20, "1": 20, "2": 20, "3": 4}
    plan = make_plan("dlion", DLionSection(min_batch=1), 16, curves, 1437)
    assert plan["batches"]["3"] == 1


def _fake_step(times: dict[int, list[float]]) -> object:
    calls: dict[int, int] = {}

    def step(m: int) -> float:
        i = calls.get(m, 0)
        calls[m] = i + 1
        seq = times[m]
        return seq[min(i, len(seq) - 1)]

    return step


def test_a_pilot_repeats_rounds_until_its_windows_agree() -> None:
    # batch 4: one warm-up call, then windows of two steps; round 1 is disturbed (4x slower)
    step = _fake_step({4: [0.01, 0.04, 0.04, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01]})
    curve = pilot(step, [4], seconds=0.0, rounds=1, max_rounds=4)  # type: ignore[arg-type]
    # rounds: 100/s (disturbed), 400/s, 400/s: stable after the third, best window counts
    assert curve == [(4, 400.0)]
    steady = _fake_step({4: [0.01] * 20})
    assert pilot(steady, [4], seconds=0.0, rounds=2) == [(4, 400.0)]  # type: ignore[arg-type]


def test_a_cpu_timed_pilot_takes_the_quota_from_the_whole_pilot() -> None:
    """0.3 core in 100 ms periods: a step's CPU is exact, its wall time depends on where the
    stalls fall. The windows' wall times below are that luck (the best window of each size is
    30% faster than the pilot's pace); CPU over wall across the pilot is the share, 0.3."""
    clock = {"cpu": 0.0}
    cpu_per_step = {4: 0.010, 8: 0.016}
    walls = iter([0.010, 0.010] + [0.0233, 0.0434, 0.0533, 0.0533] * 2)

    def step(m: int) -> float:
        clock["cpu"] += cpu_per_step[m]
        return next(walls)

    curve = pilot(step, [4, 8], 0.0, rounds=2, max_rounds=2, cpu=lambda: clock["cpu"])
    cpus = 2 * 2 * (0.010 + 0.016)
    share = cpus / (2 * (0.0233 + 0.0434 + 0.0533 + 0.0533))
    assert curve == [(4, pytest.approx(4 / 0.010 * share)), (8, pytest.approx(8 / 0.016 * share))]
    assert share == pytest.approx(0.3, abs=1e-3)
    # by wall time alone each size's luckiest window sets its capacity: size 8's is 60% fast
    walls = iter([0.010, 0.010] + [0.0233, 0.0434, 0.0533, 0.0533] * 2)
    by_wall = pilot(step, [4, 8], 0.0, rounds=2, max_rounds=2)
    assert by_wall == [(4, pytest.approx(8 / 0.0667)), (8, pytest.approx(16 / 0.0667))]


def _hold(lock_dir: str, out: str, tag: str) -> None:
    with one_pilot_at_a_time(lock_dir), open(out, "a") as fh:
        fh.write(f"{tag}+\n")
        fh.flush()
        time.sleep(0.2)  # a pilot's work, inside the lock
        fh.write(f"{tag}-\n")


def test_pilots_on_one_machine_take_turns(tmp_path: Path) -> None:
    out = tmp_path / "order.txt"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_hold, args=(str(tmp_path), str(out), t)) for t in "ab"]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    lines = out.read_text().split()
    assert len(lines) == 4 and lines[0][0] == lines[1][0] and lines[2][0] == lines[3][0]


def test_the_guard_caps_a_warm_up_that_makes_the_loss_climb() -> None:
    g = LossGuard(rise=0.10, patience=3)
    # warm-up 1 -> 4 while the loss falls, then the loss climbs at factor 4
    factors = [1.0, 2.0, 3.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    losses = [None, 2.0, 1.5, 1.2, 1.0, 1.05, 1.2, 1.3, 1.3]
    got = [g.factor(t, f, loss) for t, (f, loss) in enumerate(zip(factors, losses, strict=True))]
    # the climb is at the factor of the best loss: halved at t = 7 (3 iterations after t = 4)
    assert got == [1.0, 2.0, 3.0, 4.0, 4.0, 4.0, 4.0, 2.0, 2.0]
    assert g.trips == [(7, 2.0)] and g.cap == 2.0
    # later the schedule's own decay still applies under the cap
    assert g.factor(9, 0.4, 1.2) == 0.4


def test_the_guard_returns_to_the_factor_of_the_lowest_loss() -> None:
    g = LossGuard(rise=0.10, patience=2)
    seq = [(1.0, 2.0), (2.0, 1.0), (3.0, 1.2), (4.0, 1.3), (4.0, 1.3)]
    got = [g.factor(t, f, loss) for t, (f, loss) in enumerate(seq)]
    assert got == [1.0, 2.0, 3.0, 2.0, 2.0]  # the best loss was at factor 2
    quiet = LossGuard()
    assert [quiet.factor(t, 1.0, 5.0 + t) for t in range(30)] == [1.0] * 30  # eta as is
