"""The scheduled parameter-server techniques' cost model (the ps family's ``predict`` hook),
against a literal table and against the planner: sequential adds everything up, layer by layer
pays a round trip per layer, DynaComm is never slower than the others on the same costs."""

from __future__ import annotations

import pytest

from edgetrain.ps.schedule_cost import layer_costs, predict_schedule
from edgetrain.recipe import parse_recipe
from edgetrain.runtime.predict import Device, Layer, Link, Setting
from edgetrain.runtime.side import launcher_side

LAYERS = (
    Layer("conv", forward_s=0.010, backward_s=0.020, param_bytes=1_000_000),
    Layer("fc1", forward_s=0.002, backward_s=0.004, param_bytes=4_000_000),
    Layer("fc2", forward_s=0.001, backward_s=0.002, param_bytes=500_000),
)
# workers 0, 1: trainers (1 twice as slow); worker 2: the server; 10 MB/s, 5 ms one way
SETTING = Setting(
    devices=(Device("a"), Device("b", speed=0.5), Device("ps")),
    links=(Link(10e6, 0.005),),
    layers=LAYERS,
)


def test_costs_take_the_slowest_trainer_and_link() -> None:
    costs = layer_costs(SETTING, [0, 1], [2])
    assert costs.fc.tolist() == pytest.approx([0.020, 0.004, 0.002])  # speed 0.5
    assert costs.pt.tolist() == pytest.approx([0.1, 0.4, 0.05])  # bytes / 10 MB/s
    assert costs.dt == pytest.approx(0.010)  # a round trip


def test_sequential_adds_everything_up() -> None:
    p = predict_schedule("sequential", SETTING, [0, 1], [2])
    pulls = 0.010 + 0.55
    pushes = 0.010 + 0.55
    compute = 0.026 + 0.052
    assert p.iteration_s == pytest.approx(pulls + compute + pushes)
    assert p.parts["compute"] == pytest.approx(compute)
    assert p.parts["communication"] == pytest.approx(pulls + pushes)
    assert p.parts["exposed_communication"] == pytest.approx(pulls + pushes)
    assert p.bytes_per_iteration == 2 * 5_500_000 * 2


def test_dynacomm_is_never_slower_and_lbl_pays_a_round_trip_per_layer() -> None:
    times = {t: predict_schedule(t, SETTING, [0, 1], [2]).iteration_s for t in
             ("sequential", "lbl", "ibatch", "dynacomm")}  # fmt: skip
    assert times["dynacomm"] <= min(times.values()) + 1e-12
    lbl = predict_schedule("lbl", SETTING, [0, 1], [2])
    assert lbl.parts["communication"] == pytest.approx(1.1 + 6 * 0.010)


def test_the_family_hook_predicts_a_recipes_technique() -> None:
    recipe = parse_recipe(
        {
            "train": {"family": "ps", "technique": "dynacomm"},
            "workers": [{"role": "trainer", "count": 2}, {"role": "server"}],
        }
    )
    p = launcher_side("ps", "dynacomm").predict(recipe, SETTING)
    assert p is not None and p.technique == "dynacomm"
    assert p.iteration_s == predict_schedule("dynacomm", SETTING, [0, 1], [2]).iteration_s
    mercury = parse_recipe(
        {"train": {"family": "ps", "technique": "mercury"}, "workers": [{"count": 3}]}
    )
    assert launcher_side("ps", "mercury").predict(mercury, SETTING) is None
