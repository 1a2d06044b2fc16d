"""The scheduled parameter-server techniques' cost model (the ps family's ``predict`` hook),
against a literal table and against the planner: sequential adds everything up; requests are
pipelined, so layer by layer pays one round trip per direction and a small overhead per layer
(not a round trip per layer); DynaComm is never slower than the others on the same costs."""

from __future__ import annotations

import pytest

from edgetrain.ps.schedule_cost import TRANSMISSION_OVERHEAD_S, layer_costs, predict_schedule
from edgetrain.recipe import parse_recipe
from edgetrain.runtime.predict import (
    MESSAGE_CPU_S,
    WIRE_CPU_S_PER_BYTE,
    Device,
    Layer,
    Link,
    Setting,
)
from edgetrain.runtime.sharing import Topology
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
    # bytes / 10 MB/s, and the round trip (10 ms) once per direction: on the first layer's
    # pull (the first of an iteration) and its push (the last); dt is the overhead of one
    assert costs.pt.tolist() == pytest.approx([0.1 + 0.010, 0.4, 0.05])
    assert costs.gt.tolist() == pytest.approx([0.1 + 0.010, 0.4, 0.05])
    assert costs.dt == pytest.approx(TRANSMISSION_OVERHEAD_S) == pytest.approx(0.0001)


def test_sequential_adds_everything_up() -> None:
    p = predict_schedule("sequential", SETTING, [0, 1], [2])
    pulls = 0.010 + 0.0001 + 0.55
    pushes = 0.010 + 0.0001 + 0.55
    compute = 0.026 + 0.052
    assert p.iteration_s == pytest.approx(pulls + compute + pushes)
    assert p.parts["compute"] == pytest.approx(compute)
    assert p.parts["communication"] == pytest.approx(pulls + pushes)
    assert p.parts["exposed_communication"] == pytest.approx(pulls + pushes)
    assert p.bytes_per_iteration == 2 * 5_500_000 * 2


def test_dynacomm_is_never_slower_and_lbl_pays_one_round_trip_per_direction() -> None:
    times = {t: predict_schedule(t, SETTING, [0, 1], [2]).iteration_s for t in
             ("sequential", "lbl", "ibatch", "dynacomm")}  # fmt: skip
    assert times["dynacomm"] <= min(times.values()) + 1e-12
    lbl = predict_schedule("lbl", SETTING, [0, 1], [2])
    # 1.1 s of bytes, 2 round trips (not 6: the requests are pipelined), 6 overheads
    assert lbl.parts["communication"] == pytest.approx(1.1 + 2 * 0.010 + 6 * 0.0001)
    # forward: conv's pull ends at 0.010 + 0.1 + 0.0001 = 0.1101, fc1's right behind it at
    # 0.5102, fc2's at 0.5603, whose forward (0.002 at half speed) ends at 0.5623; backward:
    # fc2's gradient exists at 0.004 and its push ends at 0.0541, fc1's behind it at 0.4542,
    # conv's (ready at 0.052) goes last and is acknowledged a round trip after its bytes:
    # 0.4542 + 0.1001 + 0.010 = 0.5643
    assert lbl.iteration_s == pytest.approx(0.5623 + 0.5643)
    assert times["lbl"] < times["sequential"] == pytest.approx(0.5601 * 2 + 0.078)


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
    got = launcher_side("ps", "mercury").predict(mercury, SETTING)
    assert got is not None and got.technique == "mercury"


def test_the_family_hook_takes_the_emulated_round_trip() -> None:
    """A recipe's [ps] hold_ms is a round trip the setting's links do not carry: the hook
    predicts with half of it as each link's one-way latency (when that is longer)."""
    from dataclasses import replace

    recipe = parse_recipe(
        {
            "train": {"family": "ps", "technique": "lbl"},
            "ps": {"hold_ms": 40},
            "workers": [{"role": "trainer", "count": 2}, {"role": "server"}],
        }
    )
    p = launcher_side("ps", "lbl").predict(recipe, SETTING)
    held = replace(SETTING, links=(Link(10e6, 0.020),))
    assert p is not None
    assert p.iteration_s == pytest.approx(predict_schedule("lbl", held, [0, 1], [2]).iteration_s)
    assert p.iteration_s > predict_schedule("lbl", SETTING, [0, 1], [2]).iteration_s


def test_trainers_share_the_servers_link_and_a_wan() -> None:
    """Three trainers behind a 50 Mbit/s WAN from their server (DynaComm's testbed): after the
    barrier all three pull at once, a third of the WAN each; with the server on a 1 Gbit/s
    link and each trainer on its own 100 Mbit/s access link, their own links set the pace."""
    devices = (Device("t1"), Device("t2"), Device("t3"), Device("ps"))
    wan = Setting(
        devices,
        (Link(50e6 / 8, 0.005),),
        LAYERS,
        topology=Topology((0, 1, 2, 3), (1e9 / 8,) * 4, (0, 0, 0, 1), (50e6 / 8, 50e6 / 8)),
    )
    third = 50e6 / 8 / 3
    costs = layer_costs(wan, [0, 1, 2], [3])
    assert costs.pt.tolist() == pytest.approx([1e6 / third + 0.010, 4e6 / third, 5e5 / third])
    assert costs.gt.tolist() == pytest.approx(costs.pt.tolist())
    alone = layer_costs(wan, [0], [3])  # one trainer has the WAN to itself
    assert alone.pt[1] == pytest.approx(4e6 / (50e6 / 8))
    access = Setting(
        devices,
        (Link(100e6 / 8, 0.005),),
        LAYERS,
        topology=Topology((0, 1, 2, 3), (100e6 / 8,) * 3 + (1e9 / 8,), (0,) * 4, (None,)),
    )
    assert layer_costs(access, [0, 1, 2], [3]).pt[1] == pytest.approx(4e6 / (100e6 / 8))
    # two servers in parallel, each with its shard, never faster than the pair's own link
    two = Setting(
        devices,
        (Link(100e6 / 8),),
        LAYERS,
        topology=Topology((0, 1, 2, 3), (100e6 / 8,) * 4, (0,) * 4, (None,)),
    )
    assert layer_costs(two, [0, 1], [2, 3]).pt[1] == pytest.approx(4e6 / (100e6 / 8))


def test_messages_on_fractional_cores_set_a_cpu_floor() -> None:
    # a fast link (1 GB/s, no latency) and small layers: the timeline is all compute, but a
    # 0.2-core trainer pays for every message of its transmissions on that core, and a
    # 0.1-core shard for every trainer's
    layers = (
        Layer("conv", forward_s=0.001, backward_s=0.002, param_bytes=10_000),
        Layer("fc", forward_s=0.001, backward_s=0.002, param_bytes=90_000),
    )
    setting = Setting(
        devices=(Device("a", speed=0.2), Device("b", speed=0.4), Device("ps", speed=0.1)),
        links=(Link(1e9, 0.0),),
        layers=layers,
    )
    p = predict_schedule("sequential", setting, [0, 1], [2])
    compute = (0.003 + 0.003) / 0.2
    # one pull and one push: 2 transmissions, a request and its answer each, one shard
    trainer = (2 * 2 * 1 * MESSAGE_CPU_S + 2 * 100_000 * WIRE_CPU_S_PER_BYTE) / 0.2
    server = 2 * (2 * 2 * MESSAGE_CPU_S + 2 * 100_000 * WIRE_CPU_S_PER_BYTE) / 0.1
    assert p.parts["overhead"] == pytest.approx(trainer)
    assert p.parts["server_cpu"] == pytest.approx(server)
    assert p.iteration_s == pytest.approx(compute + trainer)  # 37.3 ms against the shard's 29.2
    assert p.parts["exposed_communication"] == pytest.approx(0.0)
    assert any("trainer's CPU sets the pace" in note for note in p.notes)
    # six trainers: the shard's floor passes the trainer's, and the wait on it is exposed
    six = Setting(setting.devices[:2] * 3 + setting.devices[2:], setting.links, layers)
    q = predict_schedule("sequential", six, [0, 1, 2, 3, 4, 5], [6])
    assert q.iteration_s == pytest.approx(3 * server)
    assert q.parts["exposed_communication"] == pytest.approx(3 * server - compute - trainer)
    assert any("slowest shard's CPU sets the pace" in note for note in q.notes)
