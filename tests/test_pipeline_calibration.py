"""The pipeline cost model calibrated on a measured run, against literal tables: a stage's CPU
as seconds per microbatch at its share, the terms from predicted and measured stages, the
calibrated model giving back what was measured, and bad figures refused."""

from __future__ import annotations

from dataclasses import replace

import pytest

from edgetrain.pipeline.calibration import Calibration, StageMeasure, calibrate
from edgetrain.pipeline.predict import Shape, predict_pipelined, stage_costs
from edgetrain.runtime.predict import Device, Layer, Link, Setting

LAYERS = (
    Layer("fc0", forward_s=0.010, backward_s=0.020, param_bytes=4_000_000, activation_bytes=64_000),
    Layer("fc1", forward_s=0.005, backward_s=0.010, param_bytes=1_000_000, activation_bytes=6_400),
    Layer("fc2", forward_s=0.001, backward_s=0.002, param_bytes=40_000, activation_bytes=640),
)
# worker 1 is twice as slow; 10 MB/s, no latency
SETTING = Setting(devices=(Device("a"), Device("b", speed=0.5)), links=(Link(10e6),), layers=LAYERS)
# the compute terms alone (a priori, a stage's loop and messages add their CPU: see the last test)
PAIRS = Shape((0, 1), ((0, 1), (1, 3)), microbatch=16, store="pairs", extra=1, outside_s=0.0)


def test_a_stage_cpu_as_seconds_per_microbatch_at_its_share() -> None:
    m = StageMeasure(100, compute_cpu_s=1.2, replay_cpu_s=0.2, process_cpu_s=1.5, cores=0.5)
    assert m.compute_s == pytest.approx(0.020)  # (1.2 - 0.2) / 100 / 0.5
    assert m.replay_s == pytest.approx(0.004)
    assert m.outside_s == pytest.approx(0.006)  # (1.5 - 1.2) / 100 / 0.5
    # process CPU read a moment before the compute timers: no negative outside
    assert StageMeasure(10, 1.0, 0.0, 0.99, 1.0).outside_s == 0.0


def test_terms_from_predicted_and_measured_stages() -> None:
    # a priori: stage 0 computes 0.030 and replays 0.030, stage 1 0.036 and 0.012
    costs = stage_costs(SETTING, PAIRS)
    measured = [
        # 0.045 compute, 0.036 replay, 0.003 outside per microbatch
        StageMeasure(200, compute_cpu_s=16.2, replay_cpu_s=7.2, process_cpu_s=16.8, cores=1.0),
        # at half a core: 0.036 compute, 0.018 replay, 0.010 outside
        StageMeasure(200, compute_cpu_s=5.4, replay_cpu_s=1.8, process_cpu_s=6.4, cores=0.5),
    ]
    cal = calibrate(costs, measured, [1.0, 0.5])
    assert cal.compute_scale == pytest.approx((0.045 + 0.036) / (0.030 + 0.036))
    assert cal.replay_scale == pytest.approx((0.036 + 0.018) / (0.030 + 0.012))
    # outside at speed 1: 0.003 x 1 and 0.010 x 0.5, their mean
    assert cal.outside_s == pytest.approx(0.004)
    assert cal.as_dict() == pytest.approx(
        {"compute_scale": 81 / 66, "replay_scale": 54 / 42, "outside_ms": 4.0}
    )


def test_the_calibrated_model_gives_back_a_one_stage_run() -> None:
    local = Shape(workers=(1,), bounds=((0, 3),), microbatch=16, outside_s=0.0)
    (cost,) = stage_costs(SETTING, local)
    assert cost.compute_s == pytest.approx(0.096)  # 0.048 at half speed
    # measured: 0.120 of compute and 0.008 outside per microbatch at the host's half core
    measured = StageMeasure(50, compute_cpu_s=3.0, replay_cpu_s=0.0, process_cpu_s=3.2, cores=0.5)
    cal = calibrate([cost], [measured], [0.5])
    assert (cal.compute_scale, cal.replay_scale) == pytest.approx((1.25, 1.0))
    p = predict_pipelined("local", SETTING, cal.apply(local))
    assert p.iteration_s == pytest.approx(0.128)
    assert p.parts["overhead"] == pytest.approx(0.008)


def test_calibrated_stages_replay_and_outside() -> None:
    cal = Calibration(compute_scale=2.0, replay_scale=0.5, outside_s=0.002)
    stages = stage_costs(SETTING, cal.apply(PAIRS))
    # stage 0: 0.030 x 2 + 0.030 x 0.5 + 0.002; stage 1 at half speed: 0.072 + 0.006 + 0.004
    assert [s.compute_s for s in stages] == pytest.approx([0.077, 0.082])
    assert [s.replay_s for s in stages] == pytest.approx([0.015, 0.006])
    assert [s.outside_s for s in stages] == pytest.approx([0.002, 0.004])
    p = predict_pipelined("mcpipe", SETTING, cal.apply(PAIRS))
    # stage 1 bounds the pace (82 ms); near balance, the waits add 5.07 ms
    assert p.iteration_s == pytest.approx(0.087070, abs=1e-6)
    assert p.parts["overhead"] == pytest.approx(0.004)
    # a priori: the loop's CPU, two messages and one side of their 2 x 64 kB (stage 0 is the
    # slowest)
    a_priori = predict_pipelined("mcpipe", SETTING, replace(PAIRS, outside_s=None))
    assert a_priori.parts["overhead"] == pytest.approx(0.2e-3 + 2 * 0.2e-3 + 2 * 64_000 * 0.71e-9)
    # calibrated, the run's figure replaces both: the terms a priori are left out of compute
    costs = stage_costs(SETTING, replace(PAIRS, outside_s=None))
    measured = [StageMeasure(100, 6.0, 3.0, 6.0, 1.0), StageMeasure(100, 2.4, 0.6, 2.4, 0.5)]
    assert calibrate(costs, measured, [1.0, 0.5]).compute_scale == pytest.approx(1.0)


@pytest.mark.parametrize(
    "args",
    [
        (0, 1.0, 0.0, 1.0, 1.0),  # no microbatches
        (10, 1.0, 0.0, 1.0, 0.0),  # no cores
        (10, 1.0, 2.0, 3.0, 1.0),  # replay over compute
        (10, float("nan"), 0.0, 1.0, 1.0),
        (10, -1.0, 0.0, 1.0, 1.0),
    ],
)
def test_bad_figures_are_refused(args: tuple[int, float, float, float, float]) -> None:
    with pytest.raises(ValueError):
        StageMeasure(*args)


def test_calibrate_needs_matching_stages() -> None:
    costs = stage_costs(SETTING, PAIRS)
    one = StageMeasure(10, 1.0, 0.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="2 predicted stages, 1 measured"):
        calibrate(costs, [one], [1.0])
