"""`plan --pipeline` on the family's one cost model (:mod:`edgetrain.pipeline.predict`):
literal tables where links and mcPipe's replay move the cut, where stage 0's window makes the
min-max cut slower than another, the plan file's predicted figures, the paced partitioner
against brute force, and the plan and the family's ``predict`` hook giving the same iteration
for the same setting."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from edgetrain.pipeline.partition import bounds_of, partition, partition_paced
from edgetrain.pipeline.partition_file import plan_document
from edgetrain.pipeline.predict import (
    Shape,
    choose,
    cost_function,
    predict_pipelined,
    unit_layers,
)
from edgetrain.pipeline.table import LeafInfo, UnitInfo
from edgetrain.runtime.predict import Device, Link, Setting
from tests.helpers.cli import run_cli


def _linear(index: int, fan_in: int, fan_out: int, params: int) -> UnitInfo:
    pair = fan_in + fan_out
    leaf = LeafInfo("Linear", fan_in, fan_out, params)
    return UnitInfo(
        index,
        str(index),
        "Linear",
        params,
        4 * params,
        (fan_in,),
        (fan_out,),
        pair,
        params,
        (leaf,),
    )


# a wide unit (2,000 outputs) then two narrow ones; 30 ms each at b = 4; 1 MB/s links
UNITS = [_linear(0, 10, 2000, 1000), _linear(1, 2000, 10, 1000), _linear(2, 10, 10, 100)]
TIMES = [(0.010, 0.020)] * 3
B = 4
SETTING = Setting((Device("a"), Device("b")), (Link(1e6),), unit_layers(UNITS, B, TIMES), batch=B)


def _shape(store: str, extra: int = 0) -> Shape:
    """The compute and link terms alone (no CPU outside the compute blocks)."""
    pairs = tuple(u.pair_elems for u in UNITS)
    return Shape((0, 1), [(0, 3)] * 2, B, store, extra=extra, pair_elems=pairs, outside_s=0.0)


def test_the_unit_table_becomes_the_models_layers() -> None:
    layers = SETTING.layers
    assert [x.activation_bytes for x in layers] == [4 * 2000 * 4, 4 * 10 * 4, 4 * 10 * 4]
    assert [x.param_bytes for x in layers] == [4000, 4000, 400]
    # no profile: multiply-accumulates stand for time, a backward twice a forward (once for
    # the first unit, which computes no input error)
    rel = unit_layers(UNITS, B)
    assert [(x.forward_s, x.backward_s) for x in rel][:2] == [(4000, 4000), (4000, 8000)]


def test_links_move_the_cut_past_the_wide_activation() -> None:
    # cut after unit 0: the link carries 2 x 32 kB at 1 MB/s = 64 ms > 30 ms of compute
    cost = cost_function(SETTING, _shape("versions"), "time", UNITS)
    assert cost(0, 1, 0) == pytest.approx(0.064)
    assert cost(0, 2, 0) == pytest.approx(0.060)  # 2 x 160 B cross: 0.32 ms
    assert choose(SETTING, _shape("versions"), "time", UNITS).bounds == ((0, 2), (2, 3))
    # compute alone ties at 60 ms: the lexicographically smallest cut
    blind = choose(SETTING, _shape("versions"), "time", UNITS, links=False)
    assert blind.bounds == ((0, 1), (1, 3))


def test_replay_on_stage_0_and_its_window_choose_the_cut() -> None:
    # at 0.8 MB/s; mcPipe, e = 0: m = 2, 1. A pending update replays one weight gradient: half
    # of the model's first unit's 30 ms (no input error), a third of the others'. After unit 0:
    # stage 0 max(30 + 15, 80 link) and 60 ms; after unit 1: 60 + 25 = 85 and 30 ms. Min-max
    # picks the first (80 ms) ...
    setting = Setting(SETTING.devices, (Link(0.8e6),), SETTING.layers, batch=B)
    shape = _shape("pairs")
    cost = cost_function(setting, shape, "time", UNITS)
    minmax = partition(3, 2, cost)
    assert minmax.bounds == ((0, 1), (1, 3)) and minmax.bottleneck == pytest.approx(0.080)
    # ... but two in flight cannot cover its round trip (45 + 80 + 60 ms): 92.5 ms per
    # microbatch at best, 108.75 ms with the waits at busy stations (the cycle's analysis)
    slow = predict_pipelined("mcpipe", setting, replace(shape, bounds=minmax.bounds))
    assert slow.iteration_s == pytest.approx(0.10875)
    assert slow.parts["queueing"] == pytest.approx(0.10875 - 0.0925)
    assert "window" in slow.notes[0]
    # the other cut paces at 85 ms (round trip 115.4 / 2 = 57.7 ms): the plan takes it
    got = choose(setting, shape, "time", UNITS)
    assert got.bounds == ((0, 2), (2, 3)) and got.costs == pytest.approx((0.085, 0.030))
    fast = predict_pipelined("mcpipe", setting, replace(shape, bounds=got.bounds))
    assert fast.iteration_s == pytest.approx(0.085)
    assert fast.parts["replay"] == pytest.approx(0.025)
    # one more in flight (m = 3, 2): stage 0 replays two updates, stage 1 one; the window covers
    deeper = choose(setting, _shape("pairs", extra=1), "time", UNITS)
    assert deeper.bounds == ((0, 1), (1, 3))
    assert deeper.costs == pytest.approx((0.080, 0.080))


def test_the_plan_file_holds_the_predicted_figures() -> None:
    shape = _shape("versions")
    part = choose(SETTING, shape, "time", UNITS)
    doc = plan_document(
        UNITS, part, "time", technique="pipedream", store="mixed", setting=SETTING,
        shape=shape, timed=True, model="toy",
    )  # fmt: skip
    p = doc["predicted"]
    # round trip 60 + 0.32 + 30 ms over m_0 = 2 is 45.16 ms: stage 0's 60 ms sets the pace
    assert p["iteration_s"] == pytest.approx(0.060)
    assert p["samples_per_s"] == pytest.approx(4 / 0.060)
    assert p["parts"]["compute"] == pytest.approx(0.060)
    assert p["parts"]["communication"] == pytest.approx(0.00032)
    assert p["parts"]["exposed_communication"] == 0.0 and p["parts"]["bubble"] == 0.0
    assert p["bytes_per_iteration"] == 2 * 160
    s0, s1 = doc["stages"]
    assert s0["predicted"]["compute_s"] == pytest.approx(0.060)
    assert s0["predicted"]["link_s"] == pytest.approx(0.00032)
    assert s1["predicted"]["compute_s"] == pytest.approx(0.030) and s1["link_Bps"] is None
    # PipeDream keeps m_s versions: 2 x 2,000 and 1 x 100 floats; saved activations
    # m x b x 4 x (in + pairs): 2 x 4 x 4 x (2,020 + 4,010) and 1 x 4 x 4 x (10 + 20)
    assert [s["est_memory"]["resident"] for s in doc["stages"]] == [16_000, 400]
    assert [s["est_memory"]["activations"] for s in doc["stages"]] == [192_960, 480]
    assert [s["est_memory"]["transient"] for s in doc["stages"]] == [0, 0]  # fused Linear SGD
    assert p["memory_bytes"] == {"0": 16_000, "1": 400}
    # existing fields keep their meaning
    assert s0["est_time"] == pytest.approx(0.060) and s0["est_comm_s"] == pytest.approx(0.00032)
    assert doc["bottleneck"] == pytest.approx(0.060) and s0["m"] == 2 and s0["params"] == 2000
    # without a profile the costs are relative: no predicted seconds
    rel = Setting(SETTING.devices, SETTING.links, unit_layers(UNITS, B))
    part = choose(rel, shape, "time", UNITS, links=False)
    doc = plan_document(
        UNITS, part, "time", technique="pipedream", store="mixed", setting=rel, shape=shape,
        timed=False, model="toy",
    )  # fmt: skip
    assert doc["predicted"] is None and doc["time_source"] == "multiply-accumulates"


def test_a_device_over_its_memory_cannot_take_the_stage() -> None:
    capped = Setting(
        (Device("a", memory_bytes=100_000), Device("b")), SETTING.links, SETTING.layers, B
    )
    # units 0-1 on stage 0 need 16,000 + 192,960 bytes: over the cap, so the cut moves
    got = choose(capped, _shape("versions"), "time", UNITS)
    assert got.bounds == ((0, 1), (1, 3))


@pytest.mark.parametrize("seed", range(40))
def test_the_paced_partition_against_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    units, stages = rng.randint(2, 7), rng.randint(1, 4)
    if stages > units:
        stages = units
    window = rng.randint(1, stages + 1)
    compute = [rng.choice([1.0, 2.0, 3.0, 5.0, 8.0]) for _ in range(units)]
    link = [rng.choice([0.0, 1.0, 4.0, 9.0]) for _ in range(units)]
    speed = [rng.choice([0.5, 1.0, 2.0]) for _ in range(stages)]

    def cost(i: int, k: int, s: int) -> float:
        return max(sum(compute[i:k]) / speed[s], link[k - 1] if k < units else 0.0)

    def trip(i: int, k: int, s: int) -> float:
        return sum(compute[i:k]) / speed[s] + (link[k - 1] if k < units else 0.0)

    def period(bounds: tuple[tuple[int, int], ...]) -> float:
        keys = [(lo, hi, s) for s, (lo, hi) in enumerate(bounds)]
        return max(max(cost(*x) for x in keys), sum(trip(*x) for x in keys) / window)

    got = partition_paced(units, stages, cost, trip, window)
    best = min(
        period(bounds_of([b - a for a, b in itertools.pairwise((0, *cuts, units))]))
        for cuts in itertools.combinations(range(1, units), stages - 1)
    )
    assert period(got.bounds) == pytest.approx(best)
    assert got.costs == pytest.approx(tuple(cost(lo, hi, s) for s, (lo, hi) in
                                            enumerate(got.bounds)))  # fmt: skip


RECIPE = """
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "pipeline"
technique = "{technique}"
epochs = 1
batch_size = 16
momentum = 0
[pipeline]
microbatches = 40
[[workers]]
role = "stage"
count = 2
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("technique", ["pipedream", "mcpipe"])
def test_plan_and_the_family_hook_predict_the_same_iteration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], technique: str
) -> None:
    from edgetrain.recipe import load_recipe
    from edgetrain.runtime.setting_build import layers_from_profile, sustained_scale
    from edgetrain.runtime.side import launcher_side

    run = tmp_path / "RUN"
    code, _, err = run_cli(
        capsys, "profile", "-m", "mlp", "-i", "1x8x8", "-b", "16", "--run-dir", str(run),
        "--host-name", "h", "--repeats", "1", "--warmup", "0", "--min-time", "0",
        "--kernels", "pipeline",
    )  # fmt: skip
    assert code == 0, err
    recipe_path = tmp_path / "r.toml"
    recipe_path.write_text(RECIPE.format(technique=technique))
    profile = run / "profiles" / "h.json"
    code, out, err = run_cli(
        capsys, "plan", "--pipeline", "--recipe", str(recipe_path), "--profile", str(profile),
        "--speeds", "1,3", "--bandwidth", "1mbit", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["time_source"] == "profile" and doc["predicted"]["microbatches"] == 40
    # the same setting for the hook: the profile's layers scaled to the pipeline's own kernels,
    # stage 1 three times slower, 1 Mbit/s
    prof = json.loads(profile.read_text())
    assert prof["kernels"]["pipeline"]["batch"] == 16
    layers = layers_from_profile(prof, 16, sustained_scale(prof, "pipeline"))
    setting = Setting((Device("a"), Device("b", speed=1 / 3)), (Link(1e6 / 8),), layers, 16)
    recipe, _ = load_recipe(recipe_path)
    hook = launcher_side("pipeline", technique).predict(recipe, setting)
    assert hook is not None
    assert hook.iteration_s == pytest.approx(doc["predicted"]["iteration_s"])
    assert dict(hook.parts) == pytest.approx(doc["predicted"]["parts"])
    assert {str(w): b for w, b in hook.memory_bytes.items()} == doc["predicted"]["memory_bytes"]
    # and with the plan's cuts as the recipe's split
    split = [hi - lo for lo, hi in (s["units"] for s in doc["stages"])]
    pinned = recipe_path.read_text().replace("[pipeline]\n", f"[pipeline]\nsplit = {split}\n")
    recipe_path.write_text(pinned)
    again = launcher_side("pipeline", technique).predict(load_recipe(recipe_path)[0], setting)
    assert again is not None and again.iteration_s == pytest.approx(hook.iteration_s)
    # the table says it too
    code, out, err = run_cli(
        capsys, "plan", "--pipeline", "--recipe", str(recipe_path), "--profile", str(profile),
        "--speeds", "1,3", "--bandwidth", "1mbit", "--run-dir", str(tmp_path),
    )  # fmt: skip
    assert code == 0, err
    flat = " ".join(out.split())
    assert f"predicted: {doc['predicted']['iteration_s'] * 1e3:.2f} ms per microbatch" in flat
