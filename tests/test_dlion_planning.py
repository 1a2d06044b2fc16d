"""DLion's pure planning against literal tables: the capacity-aware batch planner
(gossip.md B.3), the LR/BS schedules (B.4, Table 1's policies) and the start plan the
controller sends DLion, Gaia and Ako."""

from __future__ import annotations

import pytest

from edgetrain.gossip.config import DLionSection
from edgetrain.gossip.exchange.batching import (
    apportion,
    capacity_at,
    default_t_bs,
    plan_batches,
    step_time,
    uniform_plan,
)
from edgetrain.gossip.exchange.controller import make_plan, parse_curve
from edgetrain.gossip.exchange.schedules import Schedule, progress

FLAT = [[(48, 300.0)], [(48, 100.0)], [(48, 100.0)], [(48, 100.0)]]  # C = (300, 100, 100, 100)


def test_the_specifications_worked_example() -> None:
    # B.3: C = (300, 100, 100, 100), b0 = 48: T_unit = 192 / 600 = 0.32 s, m = (96, 32, 32, 32)
    plan = plan_batches(FLAT, 48, t_bs=800)
    assert plan.batches == (96, 32, 32, 32)
    assert plan.t_unit == pytest.approx(0.32)
    assert plan.total == 192 == 4 * 48  # the equal-total rule
    assert plan.spread == pytest.approx(0.0) and plan.within_epsilon and not plan.capped
    # the uniform baseline: 48 each, the slowest sets 0.48 s, the fast worker idles 2/3
    base = uniform_plan(FLAT, 48)
    assert base.batches == (48, 48, 48, 48) and base.t_unit == pytest.approx(0.48)
    assert base.spread == pytest.approx(2 / 3)
    # the ideal bound of R-DL-1: 1 - 0.32 / 0.48 = 1/3
    assert 1 - plan.t_unit / base.t_unit == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    "t_bs, rule, batches, t_unit, capped",
    [
        (None, "equal-total", (96, 32, 32, 32), 0.32, False),
        (192, "equal-total", (96, 32, 32, 32), 0.32, False),
        (100, "equal-total", (50, 17, 17, 16), 100 / 600, True),  # cut to T_bs, ratios kept
        (None, "slowest", (144, 48, 48, 48), 0.48, False),  # the slowest keeps b0
        (200, "slowest", (100, 34, 33, 33), 200 / 600, True),
    ],
)
def test_batch_plans_table(t_bs, rule, batches, t_unit, capped) -> None:
    plan = plan_batches(FLAT, 48, t_bs=t_bs, rule=rule)
    assert plan.batches == batches
    assert plan.t_unit == pytest.approx(t_unit)
    assert plan.capped is capped
    if t_bs is not None:
        assert plan.total <= t_bs


def test_curves_with_a_fixed_cost_per_step_are_solved_exactly() -> None:
    # step time 10 ms + m ms (fast) and 10 ms + 3m ms (slow): equal at m0 = 3 m1, so with a
    # total of 64 the plan is 48 / 16, both 58 ms; a fixed point on C(m) would drift instead
    fast = [(m, m / (0.010 + 0.001 * m)) for m in (8, 16, 32, 64, 128)]
    slow = [(m, m / (0.010 + 0.003 * m)) for m in (8, 16, 32, 64, 128)]
    plan = plan_batches([fast, slow], 32)
    assert plan.batches == (48, 16)
    assert plan.times == pytest.approx((0.058, 0.058))
    assert plan.spread == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    "m, capacity",
    [
        (8, 800.0),  # measured
        (32, 1600.0),  # measured
        (16, 16 / (0.01 + 0.01 * 8 / 24)),  # linear in step time between them
        (4, 4 / (0.01 - 4 * 0.01 / 24)),  # the first segment's line below the smallest
        (64, 1600.0),  # the largest one's capacity beyond it
    ],
)
def test_capacity_curve_interpolation(m, capacity) -> None:
    curve = [(32, 1600.0), (8, 800.0)]  # any order: 10 ms at 8, 20 ms at 32
    assert capacity_at(curve, m) == pytest.approx(capacity)
    assert step_time(curve, m) == pytest.approx(m / capacity)


def test_a_noisy_curve_never_makes_a_larger_batch_faster() -> None:
    noisy = [(8, 1000.0), (16, 3000.0), (32, 2000.0)]  # 8 ms, 5.3 ms (a dip), 16 ms
    times = [step_time(noisy, m) for m in (8, 12, 16, 24, 32)]
    assert times == sorted(times)


@pytest.mark.parametrize(
    "total, weights, expected",
    [
        (10, [1, 1, 1], (4, 3, 3)),
        (192, [300, 100, 100, 100], (96, 32, 32, 32)),
        (5, [100, 1, 1, 1], (2, 1, 1, 1)),  # at least one each
        (7, [1, 2], (2, 5)),
    ],
)
def test_apportion_table(total, weights, expected) -> None:
    assert apportion(total, weights) == expected
    assert sum(expected) == total


def test_t_bs_is_ten_percent_or_the_knee() -> None:
    assert default_t_bs(8000) == 800
    assert default_t_bs(8000, knee=640) == 640
    assert default_t_bs(1437) == 143
    # never below the starting total k b0 (digits at b0 = 64 on four workers: 256, not 143)
    assert default_t_bs(1437, start_total=256) == 256
    assert default_t_bs(8000, knee=640, start_total=256) == 640


# ------------------------------------------------------------------ schedules


@pytest.mark.parametrize(
    "lr_policy, decay, pi, factor",
    [
        ("small", False, 0.0, 1.0),
        ("small", False, 0.9, 1.0),
        ("large", False, 0.0, 4.0),
        ("warmup", False, 0.0, 1.0),
        ("warmup", False, 0.05, 2.5),  # linear: 1 + 3 * 0.05 / 0.10
        ("warmup", False, 0.10, 4.0),  # k eta exactly at pi_w
        ("warmup", False, 0.90, 4.0),
        ("warmup", True, 0.79, 4.0),
        ("warmup", True, 0.80, 0.4),  # DecayLR: x 0.1 from pi_d on
        ("small", True, 0.85, 0.1),
    ],
)
def test_learning_rate_table(lr_policy, decay, pi, factor) -> None:
    s = Schedule(4, lr_policy=lr_policy, decay=decay)
    assert s.lr_factor(pi) == pytest.approx(factor)


BASE = (96, 32, 32, 32)


@pytest.mark.parametrize(
    "bs_policy, pi, t_bs, batches",
    [
        ("static", 0.95, 800, BASE),
        ("speedup", 0.69, 800, BASE),
        ("speedup", 0.70, 800, (192, 64, 64, 64)),  # x 2 from pi_s
        ("speedup", 0.70, 300, (150, 50, 50, 50)),  # capped at T_bs, ratios kept
        ("increase", 0.24, 800, BASE),
        ("increase", 0.25, 800, (144, 48, 48, 48)),  # x 1.5
        ("increase", 0.50, 800, (216, 72, 72, 72)),  # x 2.25
        ("increase", 0.75, 800, (324, 108, 108, 108)),  # x 3.375 = 648
        ("increase", 0.75, 500, (250, 84, 83, 83)),
    ],
)
def test_batch_size_table(bs_policy, pi, t_bs, batches) -> None:
    s = Schedule(4, bs_policy=bs_policy)
    assert s.batches(pi, BASE, t_bs) == batches


@pytest.mark.parametrize("policy", ["static", "speedup", "increase"])
def test_no_batch_schedule_ever_exceeds_t_bs(policy) -> None:
    s = Schedule(4, bs_policy=policy, speedup_factor=8.0, increase_factor=3.0)
    for t_bs in (192, 250, 400, 800, 5000):
        for i in range(101):
            assert sum(s.batches(i / 100, BASE, t_bs)) <= t_bs


def test_progress_is_the_share_of_planned_samples() -> None:
    assert progress(0, 10, 8000) == 0.0
    assert progress(8000, 10, 8000) == pytest.approx(0.1)
    assert progress(10**9, 10, 8000) == 1.0


# ------------------------------------------------------------------ the start plan


def test_the_controller_plan_for_dlion_gaia_and_ako() -> None:
    curves = {0: [(48, 300.0)], 1: [(48, 100.0)], 2: [(48, 100.0)], 3: [(48, 100.0)]}
    dl = make_plan("dlion", DLionSection(), 48, curves, 8000)
    assert dl["batches"] == {"0": 96, "1": 32, "2": 32, "3": 32}
    assert dl["t_bs"] == 800 and dl["t_unit"] == pytest.approx(0.32) and dl["rule"] == "equal-total"
    assert dl["t_iter"] == pytest.approx(0.48)  # the slowest worker at b0
    off = make_plan("dlion", DLionSection(batching=False), 48, curves, 8000)
    assert off["batches"] == {"0": 48, "1": 48, "2": 48, "3": 48} and off["rule"] == "uniform"
    for technique in ("gaia", "ako"):
        plan = make_plan(technique, None, 48, curves, 8000)
        assert plan["batches"] == {"0": 48, "1": 48, "2": 48, "3": 48} and plan["t_bs"] is None
    capped = make_plan("dlion", DLionSection(t_bs=100), 48, curves, 8000)
    assert sum(capped["batches"].values()) == 100


def test_the_default_cap_keeps_the_starting_total_on_a_small_training_set() -> None:
    """Digits (1,437 samples) at b0 = 64 on four workers: 10% of N is 143, under the starting
    total of 256. The batching arm keeps 256, as its no-batching baseline does, and T_bs is
    256, so SpeedUpBS may raise neither arm's total above the other's."""
    curves = {0: [(64, 300.0)], 1: [(64, 100.0)], 2: [(64, 100.0)], 3: [(64, 100.0)]}
    dl = make_plan("dlion", DLionSection(), 64, curves, 1437)
    assert dl["batches"] == {"0": 128, "1": 43, "2": 43, "3": 42}
    assert dl["t_bs"] == 256 and not dl["capped"]
    off = make_plan("dlion", DLionSection(batching=False), 64, curves, 1437)
    assert sum(off["batches"].values()) == 256 and off["t_bs"] == 256


@pytest.mark.parametrize(
    "value, ok",
    [
        ([[8, 100.0], [16, 180.5]], True),
        ([], False),
        ([[8, -1.0]], False),
        ([[0, 10.0]], False),
        ([[8, 10.0, 3]], False),
        ("8:100", False),
        ([[True, 10.0]], False),
    ],
)
def test_a_ready_reports_curve_is_checked(value, ok) -> None:
    assert (parse_curve(value) is not None) is ok
