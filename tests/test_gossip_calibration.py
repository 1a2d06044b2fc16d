"""The exchange family's cost model calibrated on a pilot's measured terms: the gradient from
each worker's capacity curve at its measured level, the loop's work the constants miss, the
planner on the measured curves, and the DLion reproduction's reading of a pilot row and its
calibrated error claim. Literal tables; pure."""

from __future__ import annotations

import pytest

from edgetrain.gossip.config import AkoSection, DLionSection, GaiaSection
from edgetrain.gossip.cost_model import Constants
from edgetrain.gossip.exchange.batching import plan_batches
from edgetrain.gossip.exchange.cost_ako import predict_ako
from edgetrain.gossip.exchange.cost_calibration import Calibration, with_extra
from edgetrain.gossip.exchange.cost_dlion import calibrated, plan_of, predict_dlion
from edgetrain.gossip.exchange.cost_gaia import predict_gaia
from edgetrain.gossip.exchange.cost_round import ExchangeShape
from edgetrain.runtime.predict import Device, Layer, Link, Setting
from reproductions.dlion_calibration import calibrated_map, calibration_of
from reproductions.dlion_plan import Plan
from reproductions.dlion_regime import Setting as MapSetting
from reproductions.dlion_regime_claims import calibrated_errors, error_claims

LAYERS = (Layer("fc", forward_s=0.010, backward_s=0.020, param_bytes=400_000),)  # 100k entries
# worker 0 one core, worker 1 a third of one (no quota period: uniformly slow)
SETTING = Setting(
    devices=(Device("fast"), Device("slow", speed=1 / 3)),
    links=(Link(125e6, 0.0001),),
    layers=LAYERS,
)
ZERO = Constants(
    **{
        **Constants().__dict__,
        **{
            k: 0.0
            for k in Constants().__dict__
            if k.endswith(
                ("_per_byte", "_per_entry", "_per_chosen", "_message", "_layer", "_iteration")
            )
        },
    }
)
# step times: 2 ms fixed plus 0.1 ms a sample on the fast worker; three times that on the slow
FAST = [(8, 8 / 0.0028), (32, 32 / 0.0052), (64, 64 / 0.0084), (128, 128 / 0.0148)]
SLOW = [(m, c / 3) for m, c in FAST]
MEASURED = Calibration(
    batch=32,
    curves={0: FAST, 1: SLOW},
    gradient_cpu_s={0: 0.0065, 1: 0.0065},  # 1.25x the fast curve's 5.2 ms at b = 32
    loop_cpu_s={0: 0.003, 1: 0.004},
)
SHAPE = ExchangeShape(workers=(0, 1), b0=32)
NOBATCH = DLionSection(batching=False, we_when="none")


def test_the_gradient_follows_the_curve_at_the_measured_level() -> None:
    # the fast curve's step at 32 is 5.2 ms, measured 6.5 ms: every size 1.25x the curve's
    assert MEASURED.gradient_s(0, 32) == pytest.approx(0.0065)
    assert MEASURED.gradient_s(0, 64) == pytest.approx(1.25 * 0.0084)
    assert MEASURED.gradient_s(0, 48) == pytest.approx(1.25 * (0.0052 + 0.0032 / 2))
    # the slow curve is 3x the fast one's wall; the measured CPU sets the level, not the wall
    assert MEASURED.gradient_s(1, 128) == pytest.approx(0.0065 * 0.0148 / 0.0052)


def test_the_extra_is_the_measured_loop_over_the_model_never_below_zero() -> None:
    got = with_extra(MEASURED, {0: 0.001, 1: 0.005})
    assert got.extra_s == {0: pytest.approx(0.002), 1: 0.0}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch": 0.5},
        {"gradient_cpu_s": {0: 0.0065}},
        {"loop_cpu_s": {0: 0.003, 1: -0.001}},
        {"curves": {0: FAST, 1: []}},
    ],
)
def test_a_calibration_without_usable_terms_is_refused(kwargs: dict[str, object]) -> None:
    base = {
        "batch": 32,
        "curves": {0: FAST, 1: SLOW},
        "gradient_cpu_s": {0: 0.0065, 1: 0.0065},
        "loop_cpu_s": {0: 0.003, 1: 0.004},
    }
    with pytest.raises(ValueError):
        Calibration(**{**base, **kwargs})  # type: ignore[arg-type]


def test_a_shape_refuses_a_calibration_missing_a_worker() -> None:
    with pytest.raises(ValueError, match="every worker"):
        ExchangeShape(workers=(0, 1, 2), b0=32, calibration=MEASURED)


def test_calibrated_reproduces_the_calibrating_runs_cpu() -> None:
    """With the constants' terms at zero the extra is the whole measured loop, and the model's
    own work per worker on the calibrating run is the measured gradient plus loop CPU."""
    cal = calibrated(SETTING, SHAPE, NOBATCH, MEASURED, ZERO)
    assert cal.extra_s == {0: pytest.approx(0.003), 1: pytest.approx(0.004)}
    p = predict_dlion(SETTING, ExchangeShape((0, 1), 32, calibration=cal), NOBATCH, ZERO)
    # the slow worker: (6.5 + 4) ms of CPU at a third of a core; the 400 kB on the link
    # (3.2 ms) hides behind the fast worker's wait
    assert p.iteration_s == pytest.approx(3 * 0.0105)
    assert p.parts["unmodelled"] == pytest.approx(3 * 0.004)
    assert p.parts["compute"] == pytest.approx(3 * 0.0065)
    # the constants' own terms come off the extra: the model's update is counted once
    some = Constants(**{**ZERO.__dict__, "update_s_per_layer": 0.001})
    cal2 = calibrated(SETTING, SHAPE, NOBATCH, MEASURED, some)
    assert cal2.extra_s == {0: pytest.approx(0.002), 1: pytest.approx(0.003)}


def test_calibrated_batches_come_from_the_measured_curves() -> None:
    cal = calibrated(SETTING, SHAPE, NOBATCH, MEASURED, ZERO)
    shape = ExchangeShape((0, 1), 32, calibration=cal)
    batches, t_unit = plan_of(SETTING, shape, DLionSection(we_when="none"))
    plan = plan_batches([FAST, SLOW], 32, None, 0.10, "equal-total", 8)
    assert [batches[0], batches[1]] == list(plan.batches)
    assert t_unit == pytest.approx(plan.t_unit)
    # equal step times at 2 + 0.1 m0 = 3 (2 + 0.1 m1) ms give the slow worker 6: the floor
    assert batches == {0: 56, 1: 8}


def test_calibrated_dlion_is_its_busiest_workers_cpu_when_the_wire_is_free() -> None:
    free = Setting(SETTING.devices, (Link(1e15, 0.0),), LAYERS)
    cal = calibrated(free, SHAPE, NOBATCH, MEASURED, ZERO)
    shape = ExchangeShape((0, 1), 32, calibration=cal)
    dl = predict_dlion(free, shape, DLionSection(we_when="none"), ZERO)
    b = plan_of(free, shape, DLionSection(we_when="none"))[0]
    own = {
        0: cal.gradient_s(0, b[0]) + 0.003,
        1: 3 * (cal.gradient_s(1, b[1]) + 0.004),
    }
    assert dl.iteration_s == pytest.approx(max(own.values()))


def test_gaia_and_ako_carry_the_loops_extra() -> None:
    cal = calibrated(SETTING, SHAPE, NOBATCH, MEASURED, ZERO)
    shape = ExchangeShape((0, 1), 32, calibration=cal)
    for p in (
        predict_gaia(SETTING, shape, GaiaSection(), ZERO),
        predict_ako(SETTING, shape, AkoSection(partitions=1), ZERO),
    ):
        assert p.parts["unmodelled"] == pytest.approx(3 * 0.004)
        assert p.iteration_s >= 3 * (0.0065 + 0.004) - 1e-12


def _row(samples: int = 64 * 100) -> dict[str, object]:
    term = {"iterations": 100, "compute_cpu_s": 0.65, "cpu_s": 1.05, "computed_samples": samples}
    return {
        "run": "dlion-nobatch-pilot-lr0.01-s0",
        "terms": {"0": term, "1": {**term, "cpu_s": 1.15}},
        "curves": {"0": [[m, c] for m, c in FAST], "1": [[m, c] for m, c in SLOW]},
    }


def test_a_pilot_row_reads_as_a_calibration() -> None:
    cal = calibration_of(_row())
    assert cal is not None
    assert cal.batch == 64
    assert cal.gradient_cpu_s == {0: pytest.approx(0.0065), 1: pytest.approx(0.0065)}
    assert cal.loop_cpu_s == {0: pytest.approx(0.004), 1: pytest.approx(0.005)}
    assert cal.curves[1] == SLOW


def test_a_pilot_row_at_lengthened_batches_reads_at_their_mean() -> None:
    cal = calibration_of(_row(samples=72 * 100))  # SpeedUpBS: 64, later more
    assert cal is not None and cal.batch == pytest.approx(72)


def test_a_pilot_row_without_usable_terms_reads_as_none() -> None:
    row = _row()
    terms = row["terms"]
    assert isinstance(terms, dict)
    uneven = {**row, "terms": {**terms, "1": {**terms["1"], "computed_samples": 40 * 100}}}
    assert calibration_of(uneven) is None  # not a uniform run
    assert calibration_of({**row, "curves": {"0": [[8, 1.0]]}}) is None
    assert calibration_of({"run": "x"}) is None


def test_the_calibrated_error_claim_over_the_setting_it_predicted() -> None:
    key = "lenet5-b64@compute-p100"
    arms = {"dlion": {"sample_s": 100e-6}, "dlion-nobatch": {"sample_s": 150e-6}}
    rows = [
        {"arm": "dlion", "seed": 1, "run": "d1", "samples_per_s": 1 / 110e-6},
        {"arm": "dlion-nobatch", "seed": 1, "run": "n1", "samples_per_s": 1 / 150e-6},
        {"arm": "dlion", "seed": 2, "run": "d2", "samples_per_s": 1 / 95e-6},
    ]
    res = {
        "regime": {"chosen": key, "settings": {key: {"bed": "compute", "arms": arms}}},
        "regime_calibrated": {
            "calibrated_on": {"run": "dlion-nobatch-pilot-lr0.01-s0"},
            "settings": {key: {"arms": arms}},
        },
        "r_dl_1": rows,
    }
    errors = calibrated_errors(res)
    assert [round(e["error"], 6) for e in errors] == [0.1, 0.0, -0.05]
    claim = next(c for c in error_claims(res) if c.id == "R-DL-REc")
    assert claim.ours is not None and claim.ours.median == pytest.approx(0.05)
    assert claim.direction_agrees is True
    assert claim.details["runs"] == errors


def test_the_calibrated_map_is_the_chosen_model_at_half_and_twice_b0_every_period() -> None:
    p = Plan((1,), (1,), True, "digits", "lenet5", 30, 64, 0.01, 4.0, periods=(100, 10))
    chosen = MapSetting("lenet5", 64, "compute", 10)
    assert [c.key for c in calibrated_map(p, chosen)] == [
        "lenet5-b64@compute-p10",
        "lenet5-b32@compute-p100",
        "lenet5-b32@compute-p10",
        "lenet5-b64@compute-p100",
        "lenet5-b128@compute-p100",
        "lenet5-b128@compute-p10",
    ]
