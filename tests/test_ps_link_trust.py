"""When the live link fit may steer a re-plan, and which entry of a plan file a run uses
(issue 28), against literal tables. Pure: no processes.

The fault: a trainer running a plan file's single segment sees one transfer size, the fit
calls dt 0, and the barrier re-planned to layer-by-layer cuts 2.9x slower."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tomllib

from edgetrain.errors import EdgetrainError
from edgetrain.plan.baselines import lbl_cuts
from edgetrain.plan.simulator import simulate
from edgetrain.plan.strategies import dynacomm_cuts
from edgetrain.ps.family import plan_directive, read_plan
from edgetrain.ps.link_trust import choose_link, guarded_cuts, scaled, unidentified
from edgetrain.ps.livecosts import LinkFit, fit_link, layer_costs
from edgetrain.ps.plan_entry import PlanEntry, choice_line, nearest, plan_entries
from edgetrain.recipe import parse_recipe

# lenet5 on 8x8 digits, as `edgetrain profile` measured it: bytes and compute per layer
LAYER_BYTES = [624, 9_664, 192_480, 40_656, 3_400]
FC = np.array([2.8e-3, 1.2e-3, 1.1e-3, 4e-5, 8e-5])
BC = np.array([8.7e-4, 3.0e-3, 5.7e-4, 1.5e-4, 2.1e-4])
WHOLE = sum(LAYER_BYTES)
# the loopback link with a 2 ms hold: 3.4 ms apiece, 2 GB/s
REAL = LinkFit(0.0034, 2e9, 0)


def _seen(sizes: list[int], link: LinkFit = REAL) -> list[tuple[int, float]]:
    """What a trainer logs for transmissions of ``sizes`` over ``link`` (a little jitter)."""
    return [(b, link.dt + b / link.bandwidth + 1e-5 * (i % 3)) for i, b in enumerate(sizes)]


@pytest.mark.parametrize(
    ("sizes", "why"),
    [
        ([WHOLE] * 20, "one transfer size seen (247 kB)"),
        ([WHOLE + (i >= 10) for i in range(20)], "one transfer size seen (247 kB)"),  # a header
        ([100_000, 150_000] * 10, "transfer sizes 100 kB to 150 kB are less than 2x apart"),
        ([1000, 50_000, 1000], "3 transmissions seen, 4 needed"),
        ([1000] * 19 + [200_000], "under 2 transmissions at each end of a 2x size spread"),
    ],
)
def test_a_fit_is_unidentified_without_two_sizes_apart(sizes: list[int], why: str) -> None:
    assert unidentified(_seen(sizes)) == why


@pytest.mark.parametrize(
    "sizes",
    [
        [203_000, 44_000] * 3,  # the README's plan: two segments, 4.6x apart
        [1000, 1000, 2000, 2000],  # exactly 2x, two at each end
        LAYER_BYTES * 3,  # layer by layer (the cold start)
    ],
)
def test_a_fit_is_identified_by_two_sizes_apart(sizes: list[int]) -> None:
    assert unidentified(_seen(sizes)) is None


def test_the_one_size_fit_is_what_cut_layer_by_layer() -> None:
    # the fault, in the pure parts: one size makes dt 0, and the planner then cuts every layer
    raw = fit_link(_seen([WHOLE] * 20))
    assert raw is not None and raw.dt == 0.0
    costs = layer_costs(LAYER_BYTES, FC, BC, raw, raw)
    cuts = dynacomm_cuts(costs)
    assert cuts[1] == [1, 2, 3, 4] and len(cuts[0]) >= 2  # (near) layer by layer
    # ... which on the real link is far slower than the single segment it ran
    real = layer_costs(LAYER_BYTES, FC, BC, REAL, REAL)
    one = simulate(real, [], []).iteration_s
    assert simulate(real, *cuts).iteration_s > 1.5 * one


def test_the_plan_files_link_scaled_to_the_measured_time() -> None:
    prior = LinkFit(0.020, 125e6, 0)  # planned at 1 Gbit/s with a 20 ms round trip
    seen = [(250_000, 0.0044)] * 5 + [(250_000, 0.0600)]  # one stalled: the median ignores it
    got = scaled(prior, seen)
    k = 0.0044 / (0.020 + 250_000 / 125e6)
    assert got.dt == pytest.approx(0.020 * k) and got.bandwidth == pytest.approx(125e6 / k)
    assert got.dt + 250_000 / got.bandwidth == pytest.approx(0.0044)  # the measured time
    assert scaled(prior, []) is prior


def test_choose_link_keeps_the_plans_link_until_the_fit_is_identifiable() -> None:
    one = _seen([WHOLE] * 20)
    plan = LinkFit(0.020, 125e6, 0)
    choice = choose_link(one, one, (plan, plan), "plan file")
    assert choice is not None and not choice.identifiable and choice.replan
    assert choice.source == "plan file"
    assert choice.why == (
        "pull: one transfer size seen (247 kB); push: one transfer size seen (247 kB)"
    )
    assert choice.pull.dt > 0.001  # not the one-size fit's 0
    costs = layer_costs(LAYER_BYTES, FC, BC, choice.pull, choice.push)
    cuts = dynacomm_cuts(costs)
    assert cuts == ([2], [2])  # the first two layers split off to overlap layer 1's compute
    real = layer_costs(LAYER_BYTES, FC, BC, REAL, REAL)
    assert simulate(real, *cuts).iteration_s <= simulate(real, [], []).iteration_s
    # ... and they make the next epoch's sizes identifiable: 10 kB and 237 kB
    assert unidentified(_seen([10_288, 236_536] * 3)) is None
    # predicted as measured: one pull and one push of the whole model, plus compute
    predicted = simulate(costs, [], []).iteration_s
    assert predicted == pytest.approx(
        2 * (REAL.dt + WHOLE / REAL.bandwidth) + FC.sum() + BC.sum(), rel=0.02
    )
    # no link to fall back on: the one-size fit predicts, and the cuts may not change
    alone = choose_link(one, one, None, "")
    assert alone is not None and not alone.replan and alone.source == "one size"
    # two sizes apart in both directions: the fit as it is
    both = _seen([203_000, 44_000] * 4)
    fitted = choose_link(both, both, (plan, plan), "plan file")
    assert fitted is not None and fitted.identifiable and fitted.source == "fit"
    assert fitted.pull.dt == pytest.approx(REAL.dt, rel=0.05)
    # one direction identifiable (iBatch pushes layer by layer): only the other is kept
    mixed = choose_link(one, _seen(LAYER_BYTES * 3), (plan, plan), "plan file")
    assert mixed is not None and not mixed.identifiable and mixed.why.startswith("pull:")
    assert mixed.push.dt == pytest.approx(REAL.dt, rel=0.05)
    assert choose_link(one[:1], one, None, "") is None  # too few to fit at all


def test_an_unidentified_fit_never_switches_to_cuts_predicted_slower() -> None:
    one = _seen([WHOLE] * 20)
    plan = LinkFit(0.020, 125e6, 0)
    kept = choose_link(one, one, (plan, plan), "plan file")
    assert kept is not None
    costs = layer_costs(LAYER_BYTES, FC, BC, kept.pull, kept.push)
    running: tuple[list[int], list[int]] = ([], [])
    lbl = lbl_cuts(costs)
    assert guarded_cuts(costs, running, lbl, kept)[0] == running
    note = guarded_cuts(costs, running, lbl, kept)[1]
    assert note.startswith("cuts kept: the new plan is not predicted faster")
    assert guarded_cuts(costs, lbl, running, kept) == (running, "")  # faster: taken
    assert guarded_cuts(costs, running, running, kept) == (running, "")
    alone = choose_link(one, one, None, "")
    assert alone is not None
    assert guarded_cuts(costs, running, lbl, alone) == (
        running,
        "cuts kept: no trusted link to fall back on",
    )
    # an identifiable fit may change the cuts, even to ones these costs call slower
    both = _seen([203_000, 44_000] * 4)
    fitted = choose_link(both, both, None, "")
    assert fitted is not None
    assert guarded_cuts(costs, running, lbl, fitted) == (lbl, "")


PLAN = {
    "bandwidths": [
        {
            "bandwidth_Bps": rate,
            "dt_s": 0.002,
            "strategies": {"dynacomm": {"forward_cuts": cuts, "backward_cuts": cuts}},
        }
        for rate, cuts in ((1.25e6, [1, 2, 3, 4]), (12.5e6, [3]), (125e6, []))
    ]
}


def test_the_nearest_entry_in_ratio() -> None:
    entries = plan_entries(PLAN, "dynacomm")
    assert entries is not None and [e.forward_cuts for e in entries] == [[1, 2, 3, 4], [3], []]
    assert [nearest(entries, bw) for bw in (1e5, 3.9e6, 4.0e6, 50e6, 2e9)] == [0, 0, 1, 2, 2]
    assert nearest([PlanEntry([], [], None, None)], 1e6) == 0
    assert plan_entries(PLAN, "ibatch") is None


def test_the_choice_is_said_in_one_line() -> None:
    entries = plan_entries(PLAN, "dynacomm")
    assert entries is not None
    assert choice_line("plans/p.json", entries, 2, 2.5e8, "measured by this trainer") == (
        "plan file plans/p.json: using its 1 Gbit/s (125 MB/s) entry of 3 (10 Mbit/s, "
        "100 Mbit/s, 1 Gbit/s), the nearest to the 2 Gbit/s (250 MB/s) measured by this trainer"
    )
    assert choice_line("p.json", entries[:1], 0, None, "") == (
        "plan file p.json: made at 10 Mbit/s (1.25 MB/s)"
    )
    assert choice_line("p.json", entries[:1], 0, 12.5e6, "declared") == (
        "plan file p.json: made at 10 Mbit/s (1.25 MB/s) (the only entry; declared "
        "100 Mbit/s (12.5 MB/s))"
    )


def test_the_launcher_chooses_only_when_declared() -> None:
    declared = plan_directive(PLAN, "dynacomm", "plans/p.json", "100mbit")
    assert declared is not None and declared["chosen"] == 1
    assert declared["why"].endswith(
        "the nearest to the 100 Mbit/s (12.5 MB/s) declared by [ps] plan_bandwidth = '100mbit'"
    )
    measured = plan_directive(PLAN, "dynacomm", "plans/p.json", None)
    assert measured is not None and measured["chosen"] is None  # each trainer measures
    assert len(measured["entries"]) == 3


RECIPE = """
[data]
dataset = "digits"
[train]
family = "ps"
technique = "dynacomm"
[ps]
plan = "plans/p.json"
{extra}
[[workers]]
role = "server"
count = 1
[[workers]]
count = 2
"""


def test_plan_bandwidth_needs_a_unit_and_a_plan_needs_its_technique(tmp_path: Path) -> None:
    with pytest.raises(EdgetrainError, match="has no unit; write 100mbit"):
        parse_recipe(tomllib.loads(RECIPE.format(extra='plan_bandwidth = "100"')))
    recipe = parse_recipe(tomllib.loads(RECIPE.format(extra='plan_bandwidth = "1gbit"')))
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "p.json").write_text('{"strategies": {"lbl": {}}}')
    with pytest.raises(EdgetrainError, match="has no 'dynacomm' strategy"):
        read_plan(recipe, tmp_path)
    (tmp_path / "plans" / "p.json").write_text(json.dumps(PLAN))
    plan = read_plan(recipe, tmp_path)
    assert plan is not None and plan["chosen"] == 2 and plan["file"] == "plans/p.json"
