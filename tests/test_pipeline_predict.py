"""The pipeline family's cost model against literal tables: per-stage compute with mcPipe's
replay, the link, stage 0's window bound and the cycle's queueing, the loop's and messages' CPU
a priori, Local, data parallelism, resident memory, the min-max partition against brute force,
and the family hook on a recipe."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from edgetrain.pipeline.predict import (
    Shape,
    min_max_bounds,
    outside_a_priori,
    predict_dataparallel,
    predict_pipelined,
    stage_costs,
)
from edgetrain.recipe import parse_recipe
from edgetrain.runtime.predict import Device, Layer, Link, Setting
from edgetrain.runtime.side import launcher_side

# per microbatch of 16: activation bytes 64,000 / 6,400 / 640
LAYERS = (
    Layer("fc0", forward_s=0.010, backward_s=0.020, param_bytes=4_000_000, activation_bytes=64_000),
    Layer("fc1", forward_s=0.005, backward_s=0.010, param_bytes=1_000_000, activation_bytes=6_400),
    Layer("fc2", forward_s=0.001, backward_s=0.002, param_bytes=40_000, activation_bytes=640),
)
# worker 1 is twice as slow; 10 MB/s, no latency
SETTING = Setting(devices=(Device("a"), Device("b", speed=0.5)), links=(Link(10e6),), layers=LAYERS)
# the compute and link terms alone (no CPU outside the compute blocks)
TWO = Shape(workers=(0, 1), bounds=((0, 1), (1, 3)), microbatch=16, store="versions", outside_s=0.0)


def test_stage_costs_literal() -> None:
    stages = stage_costs(SETTING, TWO)
    assert [s.compute_s for s in stages] == pytest.approx([0.030, 0.036])
    assert [s.link_s for s in stages] == pytest.approx([0.0128, 0.0])  # 2 x 64 kB / 10 MB/s
    assert [s.m for s in stages] == [2, 1]
    # PipeDream keeps m_s weight versions: 2 x 1M floats at stage 0
    assert stages[0].resident_bytes == 2 * 4_000_000
    assert stages[1].resident_bytes == 1_040_000


def test_window_bound_then_compute_bound_and_the_wait_at_busy_stages() -> None:
    # m_0 = 2: one microbatch's round trip 0.030 + 0.0128 + 0.036 over two in flight bounds the
    # pace at 0.0394; with two in flight one waits at a busy stage now and then: the cycle's
    # mean-value analysis (stations 30, 12.8 and 36 ms) gives 46.887 ms
    p = predict_pipelined("pipedream", SETTING, TWO)
    assert p.iteration_s == pytest.approx(0.046887, abs=1e-6)
    assert p.parts["exposed_communication"] == pytest.approx(0.0394 - 0.036)
    assert p.parts["queueing"] == pytest.approx(0.046887 - 0.0394, abs=1e-6)
    assert "window" in p.notes[0]
    assert "near balance" in p.notes[1]
    # one extra in flight: the slow stage bounds the pace (36 ms), the wait adds 2.07 ms
    deeper = replace(TWO, extra=1)
    p = predict_pipelined("pipedream", SETTING, deeper)
    assert p.iteration_s == pytest.approx(0.038073, abs=1e-6)
    assert p.parts["compute"] == pytest.approx(0.036)
    assert p.parts["exposed_communication"] == 0.0
    assert p.parts["queueing"] == pytest.approx(0.002073, abs=1e-6)
    assert p.bytes_per_iteration == 2 * 64_000
    assert p.notes[0].startswith("stage 1 sets the pace")
    assert "near balance" in p.notes[1]
    # four extra: the wait is gone, the slow stage sets the pace
    p = predict_pipelined("pipedream", SETTING, replace(TWO, extra=4))
    assert p.iteration_s == pytest.approx(0.036)
    assert len(p.notes) == 2


def test_the_loop_and_the_messages_cpu_a_priori() -> None:
    # 0.2 ms of the loop's CPU, 0.2 ms for each of its two messages and one side of their
    # 2 x 64 kB (0.71 ns a byte) per stage, over the device's speed; the profile's cores turn CPU
    # seconds into the reference's
    a_priori = replace(TWO, outside_s=None)
    loop = 0.2e-3 + 2 * 0.2e-3 + 2 * 64_000 * 0.71e-9
    stages = stage_costs(SETTING, a_priori)
    assert [s.outside_s for s in stages] == pytest.approx([loop, loop / 0.5])
    assert [s.compute_s for s in stages] == pytest.approx([0.030 + loop, 0.036 + 2 * loop])
    at_half = replace(SETTING, reference_cores=0.5)
    assert stage_costs(at_half, a_priori)[0].outside_s == pytest.approx(loop / 0.5)
    # a reference of two cores still gives a single-threaded loop one core
    assert stage_costs(replace(SETTING, reference_cores=2.0), a_priori)[0].outside_s == (
        pytest.approx(loop)
    )
    # Local sends nothing: the loop alone
    local = Shape(workers=(0,), bounds=((0, 3),), microbatch=16)
    assert stage_costs(SETTING, local)[0].outside_s == pytest.approx(0.2e-3)
    # a middle stage sends and receives on both sides
    three = Setting(
        (Device("a"), Device("b"), Device("c")), (Link(10e6),), LAYERS, reference_cores=1.0
    )
    mid = stage_costs(three, Shape((0, 1, 2), ((0, 1), (1, 2), (2, 3)), 16))[1]
    assert mid.outside_s == pytest.approx(0.2e-3 + 4 * 0.2e-3 + 2 * (64_000 + 6_400) * 0.71e-9)
    # snapshots to the evaluator every 10 microbatches: each stage's weights (2.3 ns a byte) and
    # a message a unit, a tenth of it per microbatch
    snapping = stage_costs(SETTING, replace(a_priori, snapshot_every=10))
    assert snapping[0].outside_s == pytest.approx(loop + (4_000_000 * 2.3e-9 + 0.2e-3) / 10)
    assert snapping[1].outside_s == pytest.approx(
        (loop + (1_040_000 * 2.3e-9 + 2 * 0.2e-3) / 10) / 0.5
    )
    dp_snap = predict_dataparallel("dataparallel", SETTING, Shape((0, 1), (), 16, snapshot_every=5))
    dp_plain = predict_dataparallel("dataparallel", SETTING, Shape((0, 1), (), 16))
    assert dp_snap.parts["overhead"] - dp_plain.parts["overhead"] == pytest.approx(
        (5_040_000 * 2.3e-9 + 3 * 0.2e-3) / 5 / 0.5
    )
    # a candidate stage alone (the partitioner's): what it would receive, from its first unit's
    # input, and send
    alone = Shape((0, 1, 2), ((0, 0), (1, 2), (0, 0)), 16)
    assert outside_a_priori(three, alone, 1) == pytest.approx(mid.outside_s)
    with pytest.raises(ValueError, match="reference_cores"):
        Setting((Device("a"),), (Link(1e6),), LAYERS, reference_cores=0.0)


def test_mcpipe_replays_its_pending_updates() -> None:
    deeper = replace(TWO, store="pairs", extra=1)
    stages = stage_costs(SETTING, deeper)
    # m = 3 and 2: a weight gradient per pending update, a third of a unit's compute, but half
    # of the model's first unit's (no input error): 0.030 x (1 + 2/2) and 0.024 x (1 + 1/3)
    assert [s.compute_s for s in stages] == pytest.approx([0.060, 0.048])
    assert [s.replay_s for s in stages] == pytest.approx([0.030, 0.012])
    # pairs: P + (m - 1) x b x (in + out) per sample = 1M + 2 x 16 x 2,000 floats
    assert stages[0].resident_bytes == (1_000_000 + 2 * 16 * 2_000) * 4
    p = predict_pipelined("mcpipe", SETTING, deeper)
    # stage 0 dominates: the wait at busy stages adds 0.34 ms
    assert p.iteration_s == pytest.approx(0.060344, abs=1e-6)
    assert p.parts["replay"] == pytest.approx(0.030)
    assert p.memory_bytes == {0: stages[0].resident_bytes, 1: stages[1].resident_bytes}


def test_bubble_is_spread_over_the_epoch() -> None:
    deeper = replace(TWO, store="latest", extra=1, microbatches=10)
    p = predict_pipelined("greedy", SETTING, deeper)
    fill = 0.030 + 0.0128 + 0.036 - 0.038073
    assert p.parts["bubble"] == pytest.approx(fill / 10, abs=1e-6)
    assert p.iteration_s == pytest.approx(0.038073 + fill / 10, abs=1e-6)


def test_local_and_dataparallel() -> None:
    local = Shape(workers=(0,), bounds=((0, 3),), microbatch=16, outside_s=0.0)
    p = predict_pipelined("local", SETTING, local)
    assert p.iteration_s == pytest.approx(0.048)
    assert p.bytes_per_iteration == 0
    dp = predict_dataparallel("dataparallel", SETTING, Shape((0, 1), (), 16, outside_s=0.0))
    # half a microbatch each at the slower replica's pace, then 5.04 MB to the other replica
    assert dp.parts["compute"] == pytest.approx(0.048)
    assert dp.parts["communication"] == pytest.approx(0.504)
    assert dp.iteration_s == pytest.approx(0.552)
    assert dp.bytes_per_iteration == 2 * 5_040_000
    assert "communication dominates" in dp.notes[0]
    # a priori: the loop and one side of each 5.04 MB copy sent and received, a message each,
    # at the slower replica's half speed
    dp = predict_dataparallel("dataparallel", SETTING, Shape((0, 1), (), 16))
    outside = (0.2e-3 + 2 * (5_040_000 * 0.71e-9 + 0.2e-3)) / 0.5
    assert dp.parts["overhead"] == pytest.approx(outside)
    assert dp.iteration_s == pytest.approx(0.552 + outside)


def test_min_max_bounds_against_brute_force() -> None:
    layers = tuple(
        Layer(f"u{i}", forward_s=f, backward_s=2 * f, param_bytes=4000, activation_bytes=a)
        for i, (f, a) in enumerate(
            [(0.004, 8000), (0.001, 400_000), (0.006, 800), (0.002, 16_000), (0.003, 80)]
        )
    )
    setting = Setting(
        devices=(Device("a"), Device("b", speed=0.7), Device("c", speed=1.5)),
        links=(Link(20e6),),
        layers=layers,
    )
    for store in ("versions", "pairs"):
        shape = Shape((0, 1, 2), ((0, 5),) * 3, microbatch=8, store=store, outside_s=0.0)
        got = min_max_bounds(setting, shape)

        def worst(b: list[tuple[int, int]], store: str = store) -> float:
            stages = stage_costs(setting, Shape((0, 1, 2), b, 8, store=store, outside_s=0.0))
            return max(max(s.compute_s, s.link_s) for s in stages)

        best = min(
            worst([(0, i), (i, k), (k, 5)]) for i, k in itertools.combinations(range(1, 5), 2)
        )
        assert worst(got) == pytest.approx(best)


def test_the_family_hook_reads_the_recipe() -> None:
    recipe = parse_recipe(
        {
            "train": {"family": "pipeline", "technique": "mcpipe"},
            "pipeline": {"split": [1, 2], "window_extra": 1},
            "workers": [{"role": "stage", "count": 2}, {"role": "evaluator"}],
        }
    )
    p = launcher_side("pipeline", "mcpipe").predict(recipe, SETTING)
    assert p is not None
    # stage 0 at 60 + 0.69 ms (the loop and its messages, a priori), stage 1 at 48 + 1.38 ms:
    # stage 0 bounds the pace, the wait at busy stages adds 0.70 ms
    assert p.parts["compute"] == pytest.approx(0.0606909)
    assert p.iteration_s == pytest.approx(0.061396, abs=1e-6)
    # snapshots to the evaluator: the recipe's snapshot_every reaches the model
    snapping = parse_recipe(
        {
            "train": {"family": "pipeline", "technique": "mcpipe"},
            "pipeline": {"split": [1, 2], "window_extra": 1, "snapshot_every": 10},
            "workers": [{"role": "stage", "count": 2}, {"role": "evaluator"}],
        }
    )
    q = launcher_side("pipeline", "mcpipe").predict(snapping, SETTING)
    assert q is not None
    assert q.parts["overhead"] == pytest.approx(
        p.parts["overhead"] + (4_000_000 * 2.3e-9 + 0.2e-3) / 10
    )
    dp = parse_recipe(
        {
            "train": {"family": "pipeline", "technique": "dataparallel", "batch_size": 16},
            "workers": [{"role": "replica", "count": 2}],
        }
    )
    got = launcher_side("pipeline", "dataparallel").predict(dp, SETTING)
    assert got is not None and got.iteration_s == pytest.approx(0.5675136)
    with pytest.raises(ValueError, match="3 stage bounds for 2 workers"):
        stage_costs(SETTING, Shape((0, 1), ((0, 1), (1, 2), (2, 3)), 16))
