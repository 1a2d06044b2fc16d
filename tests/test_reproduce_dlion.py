"""The DLion reproduction's whole path at smoke size: a pilot that fixes the targets, then DLion
with and without capacity-aware batching as real runs, interleaved and resumable, into
paper-vs-edgetrain.{md,json} of the shared shape; and the claims, targets, knee and recipes
computed from literal rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgetrain.errors import EdgetrainError
from edgetrain.experiment import cli
from edgetrain.experiment.pilot import mean_accuracy
from edgetrain.recipe import parse_recipe
from edgetrain.tomlconfig import loads
from reproductions import dlion, dlion_regime, dlion_regime_claims, dlion_runs


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_smoke_reproduction_writes_the_report_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert dlion.main(["--smoke", "--out", str(out), "--format", "json"]) == 0
    doc = json.loads((out / "paper-vs-edgetrain.json").read_text())
    assert doc["paper"] == "dlion"
    # regime first: the prediction was written once, before the first run's summary
    regime_file = out / "regime.json"
    regime = json.loads(regime_file.read_text())
    assert regime["before_measured_runs"] is True and regime["commit"]
    assert regime["candidates"] == ["lenet5-b16"]  # one (its choice is tested on literals)
    assert set(regime["settings"]) == {"lenet5-b16@compute", "lenet5-b16@network"}
    chosen = regime["settings"][regime["chosen"]]
    assert chosen["bed"] == "compute" and regime["control"] is None  # smoke: no control
    assert chosen["batching_cut"] == max(
        v["batching_cut"] for v in regime["settings"].values() if v["bed"] == "compute"
    )
    for s in regime["settings"].values():
        assert set(s["arms"]) == {"dlion", "dlion-nobatch", "gaia", "ako"}
        assert all(a["iteration_s"] > 0 for a in s["arms"].values())
    assert sorted(p.name for p in (out / "profiles").iterdir()) == ["lenet5-digits-b16.json"]
    summaries = list((out / "runs").glob("*/report/summary.json"))
    assert regime_file.stat().st_mtime <= min(p.stat().st_mtime for p in summaries)
    assert doc["results"]["regime"] == regime
    ids = [c["id"] for c in doc["claims"]]
    assert ids[:2] == ["R-DL-1", "R-DL-1i"] and ids[-2:] == ["R-DL-RE", "R-DL-REc"]
    assert ids[2:-2] == [f"R-DL-R {regime['chosen']}"]
    # the model calibrated on the nobatch pilot: after the pilots, before the measured runs
    cal_file = out / "regime-calibrated.json"
    cal = json.loads(cal_file.read_text())
    assert cal["before_measured_runs"] is True and cal["chosen"] == regime["chosen"]
    assert list(cal["settings"]) == [
        "lenet5-b16@compute",
        "lenet5-b8@compute",
        "lenet5-b32@compute",
    ]
    assert cal["calibrated_on"]["run"] == "dlion-nobatch-pilot-lr0.01-s0"
    assert set(cal["settings"][regime["chosen"]]["arms"]) == set(chosen["arms"])
    pilots = [p for p in summaries if "-pilot" in p.parent.parent.name]
    measured = [p for p in summaries if "-pilot" not in p.parent.parent.name]
    assert len(pilots) == len(measured) == 2
    assert max(p.stat().st_mtime for p in pilots) <= cal_file.stat().st_mtime
    assert cal_file.stat().st_mtime <= min(p.stat().st_mtime for p in measured)
    assert doc["results"]["regime_calibrated"] == cal
    calibrated = next(c for c in doc["claims"] if c["id"] == "R-DL-REc")["details"]["runs"]
    assert {(e["arm"], e["seed"]) for e in calibrated} == {("dlion", 1), ("dlion-nobatch", 1)}
    errors = next(c for c in doc["claims"] if c["id"] == "R-DL-RE")["details"]["runs"]
    assert {(e["arm"], e["seed"]) for e in errors} == {("dlion", 1), ("dlion-nobatch", 1)}
    for claim in doc["claims"]:
        assert set(claim) >= {
            "id", "claim", "paper_value", "ours", "unit", "seeds", "direction_agrees",
            "deviations",
        }  # fmt: skip
    assert [(r["arm"], r["seed"]) for r in doc["runs"]] == [("dlion", 1), ("dlion-nobatch", 1)]
    mine, base = doc["runs"]
    b0 = chosen["b0"]
    assert sum(mine["batches"].values()) == sum(base["batches"].values()) == 4 * b0  # equal
    assert set(base["batches"].values()) == {b0}
    assert mine["iterations"] > 0 and mine["t_unit"] > 0 and base["idle"]
    results = doc["results"]
    assert results["pilot"]["seed"] == 0
    assert [r["arm"] for r in results["pilot"]["runs"]] == ["dlion", "dlion-nobatch"]
    assert 0 < results["targets"]["low"] < results["targets"]["high"]  # fixed by the pilot
    md = (out / "paper-vs-edgetrain.md").read_text()
    assert "| R-DL-1 |" in md and "## R-DL-1: capacity-aware batching" in md and "## Pilot" in md
    assert "## Regime: predicted before the runs, and measured" in md
    assert "## Cost model calibrated on the pilot, and measured" in md
    assert f"| {regime['chosen']} | dlion |" in md and "Regime first: the cost model chose" in md
    # resumable: a second pass finds every run done and launches nothing, and reads the
    # regime back without predicting it again
    mtimes = {p: p.stat().st_mtime for p in (out / "runs").glob("*/report/summary.json")}
    assert len(mtimes) == 4  # two pilots, two measured
    kept = (regime_file.stat().st_mtime_ns, regime_file.read_text())
    assert dlion.main(["--smoke", "--out", str(out), "--format", "json"]) == 0
    assert {p: p.stat().st_mtime for p in mtimes} == mtimes
    assert (regime_file.stat().st_mtime_ns, regime_file.read_text()) == kept
    assert json.loads(cal_file.read_text()) == cal  # read back, not predicted again


PLAN = dlion.Plan((1, 2), (1, 2), True, "mnist", "cnn2", 10, 32, None, 4.0)


def _row(arm: str, seed: int, **kw: object) -> dict:
    base = {"arm": arm, "seed": seed, "time_to_high": None, "time_to_low": None,
            "final_accuracy": 0.9, "accuracy_at_budget": None, "train_s": 10.0,
            "iteration_s": 0.1, "samples_per_s": 800.0, "idle": {}, "batches": {},
            "spread": 0.05, "wan_per_iteration": None, "bytes_lan": 0, "bytes_wan": 0,
            "iterations": 100}  # fmt: skip
    return {**base, **kw}


def test_r1_flags_a_cut_above_the_ideal_bound_as_a_measuring_error() -> None:
    assert dlion.ideal_cut(dlion.BEDS["compute"].shares) == pytest.approx(100 / 3)
    rows = [
        _row("dlion", 1, time_to_high=7.0), _row("dlion-nobatch", 1, time_to_high=10.0),
        _row("dlion", 2, time_to_high=6.0), _row("dlion-nobatch", 2, time_to_high=10.0),
    ]  # fmt: skip
    c = dlion.claim_r1(rows, PLAN)
    assert c.ours is not None and (c.ours.min, c.ours.max) == pytest.approx((30.0, 40.0))
    assert c.direction_agrees is True
    assert "1 value(s) above the bound 33.3" in c.deviations and "measuring error" in c.deviations
    never = dlion.claim_r1([_row("dlion", 1), _row("dlion-nobatch", 1, time_to_high=9.0)], PLAN)
    assert (
        never.ours is None
        and never.direction_agrees is None
        and "never reached" in (never.deviations)
    )


def test_r1_companions_per_iteration_and_sample_weighted() -> None:
    rows = [
        _row("dlion", 1, time_to_high=12.0, iteration_s=0.09),
        _row("dlion-nobatch", 1, time_to_high=10.0, iteration_s=0.10),
        _row("dlion", 2, time_to_high=11.0, iteration_s=0.08),
        _row("dlion-nobatch", 2, time_to_high=10.0, iteration_s=0.10),
    ]  # fmt: skip
    first = dlion.claims_r1(rows, PLAN)
    assert [c.id for c in first] == ["R-DL-1", "R-DL-1i"]  # no sample-weighted arm ran
    per_it = first[1].ours
    assert per_it is not None and (per_it.min, per_it.max) == pytest.approx((10.0, 20.0))
    assert first[1].direction_agrees is True and first[0].direction_agrees is False
    rows += [
        _row("dlion-sample", 1, time_to_high=8.0), _row("dlion-sample", 2, time_to_high=None),
    ]  # fmt: skip
    w = dlion.claims_r1(rows, PLAN)[2]
    assert w.id == "R-DL-1w" and w.seeds == [1, 2]
    assert w.ours is not None and w.ours.median == pytest.approx(20.0)  # seed 2 never reached
    assert w.direction_agrees is False  # a seed without a value fails "every seed faster"


def test_the_default_plan_adds_the_sample_weighted_arm_and_quick_does_not() -> None:
    ap = cli.parser("dlion", "doc", quick="q", smoke="s", seeds=3)
    ap.add_argument("--testbed", default="emulated")
    assert dlion.plan_for(cli.parse(ap, [])).r1_arms == dlion.R1_ARMS
    assert dlion.plan_for(cli.parse(ap, ["--quick"])).r1_arms == ("dlion", "dlion-nobatch")
    bed = dlion.Bed(dlion.BEDS["compute"])
    text = dlion.recipe(PLAN, "dlion-sample", bed, 'dataset = "digits"\n', 0.02, 128)
    parse_recipe(loads(text.format(seed=1)))  # a valid recipe
    assert 'gradient_weighting = "sample"' in text


def test_r2_counts_a_baseline_that_never_reaches_the_target_as_later() -> None:
    rows = [
        _row("dlion", 1, time_to_low=5.0), _row("gaia", 1, time_to_low=20.0),
        _row("ako", 1, time_to_low=None),
    ]  # fmt: skip
    gaia, ako = dlion.claims_r2(
        rows, dlion.Plan((1,), (1,), True, "mnist", "cnn2", 10, 32, 0.02, 1)
    )
    assert gaia.id == "R-DL-2" and gaia.ours is not None and gaia.ours.median == pytest.approx(75)
    assert gaia.direction_agrees is True
    assert ako.id == "R-DL-2b" and ako.ours is None and ako.direction_agrees is True
    assert "ako never reached T_low at seed(s) [1]" in ako.deviations


def test_r3_reports_relative_and_point_gains_and_the_wan_share() -> None:
    rows = [
        _row("dlion", 1, accuracy_at_budget=0.90, wan_per_iteration=100.0),
        _row("gaia", 1, accuracy_at_budget=0.60), _row("ako", 1, accuracy_at_budget=0.75),
        _row("dlion-fullge", 1, accuracy_at_budget=0.905, wan_per_iteration=500.0),
    ]  # fmt: skip
    one = dlion.Plan((1,), (1,), True, "mnist", "cnn2", 10, 32, 0.02, 1)
    claims = {c.id: c for c in dlion.claims_r3(rows, one)}
    assert claims["R-DL-3"].ours is not None and claims["R-DL-3"].ours.median == pytest.approx(50)
    assert claims["R-DL-3b"].ours is not None and claims["R-DL-3b"].ours.median == pytest.approx(20)
    assert "30 [30, 30] pp" in claims["R-DL-3"].deviations
    share = claims["R-DL-3c"]
    assert share.ours is not None and share.ours.median == pytest.approx(20)
    assert share.direction_agrees is True  # <= 25% and within a point


def test_r3c_compares_final_accuracy_when_dense_exchange_misses_the_budget() -> None:
    """Dense exchange over the WAN is so slow that it has no accuracy at the budget: equal
    accuracy is judged on the final accuracies (same epochs), within one point."""
    one = dlion.Plan((1,), (1,), True, "mnist", "cnn2", 10, 32, 0.02, 1)

    def share(full_final: float) -> Any:
        rows = [
            _row("dlion", 1, accuracy_at_budget=0.97, final_accuracy=0.985,
                 wan_per_iteration=0.5),
            _row("dlion-fullge", 1, accuracy_at_budget=None, final_accuracy=full_final,
                 wan_per_iteration=10.0),
        ]  # fmt: skip
        return {c.id: c for c in dlion.claims_r3(rows, one)}["R-DL-3c"]

    close = share(0.983)
    assert close.ours is not None and close.ours.median == pytest.approx(5)
    assert close.direction_agrees is True
    assert "full minus partial: -0.2 [-0.2, -0.2] pp" in close.deviations
    assert share(0.997).direction_agrees is False  # dense 1.2 points better: not equal


# pilot curves, [train_s, accuracy] after each epoch
RISING_DLION = [[10.0, 0.80], [20.0, 0.90], [30.0, 0.94], [40.0, 0.95]]
LUCKY_NOBATCH = [[10.0, 0.85], [20.0, 0.95], [30.0, 0.96], [40.0, 0.97]]
SLOW_GAIA = [[10.0, 0.50], [20.0, 0.70], [30.0, 0.80], [40.0, 0.85]]
FLAT_AKO = [[10.0, 0.90], [20.0, 0.91], [30.0, 0.905], [40.0, 0.91]]


def test_targets_sit_on_the_rising_curve_below_the_lowest_plateau() -> None:
    # T_high: the lower accuracy of DLion's pilots at half their time (0.90 at 20 s); T_low:
    # the same over every pilot (Gaia: 0.70 at 20 s)
    curves = {"dlion": RISING_DLION, "dlion-nobatch": LUCKY_NOBATCH}
    assert dlion.targets_from(curves) == {"high": 0.90, "low": 0.89}
    every = {**curves, "gaia": SLOW_GAIA, "ako": FLAT_AKO}
    assert dlion.targets_from(every) == {"high": 0.90, "low": 0.70}
    # a lucky pilot alone cannot lift a target: the lowest pilot sets it
    assert dlion.targets_from({"dlion": LUCKY_NOBATCH, "dlion-nobatch": RISING_DLION}) == (
        dlion.targets_from(curves)
    )
    # an arm that levels off early: half a point under its plateau (0.91 over 20-40 s)
    flat = {"dlion": [[10.0, 0.90], [20.0, 0.91], [30.0, 0.905], [40.0, 0.91]]}
    assert dlion.targets_from(flat) == {"high": 0.905, "low": 0.895}
    # a point missing its accuracy is left out; a diverged pilot is refused
    gap: dict[str, Any] = {"dlion": [[10.0, None], [20.0, 0.9], [40.0, 0.95]]}
    assert dlion.targets_from(gap) == {"high": 0.9, "low": 0.89}
    with pytest.raises(EdgetrainError, match="pilot's dlion-nobatch ended at accuracy 0.103"):
        dlion.targets_from({"dlion": RISING_DLION, "dlion-nobatch": [[10.0, 0.1028]]})
    with pytest.raises(EdgetrainError, match="no targets"):
        dlion.targets_from({"gaia": SLOW_GAIA})


def test_every_family_picks_its_own_learning_rate() -> None:
    finals: dict[str, dict[float, float | None]] = {
        "dlion": {0.01: 0.95, 0.02: 0.96, 0.05: 0.93},
        "gaia": {0.01: 0.90, 0.02: 0.88, 0.05: None},
        "ako": {0.01: 0.91, 0.02: 0.94, 0.05: 0.94},  # a tie: the smaller
    }
    assert dlion.pick_lrs(finals) == {"dlion": 0.02, "gaia": 0.01, "ako": 0.02}
    with pytest.raises(EdgetrainError, match="no gaia pilot learning rate"):
        dlion.pick_lrs({"gaia": {0.01: None}})
    runs = dlion_runs.Batches(PLAN, None, {}, lr=0.5, lrs={"dlion": 0.02, "ako": 0.05})  # type: ignore[arg-type]
    assert [runs.lr_of(a) for a in ("dlion-nobatch", "t1-large", "ako", "gaia")] == [
        0.02, 0.02, 0.05, 0.5
    ]  # fmt: skip


def test_targets_knee_and_learning_rate_from_pilots() -> None:
    acc = {64: 0.97, 128: 0.975, 256: 0.965, 512: 0.956, 1024: 0.93, 2048: 0.85}
    assert dlion.knee(acc) == 512  # the largest within 2 points of the best (0.975)
    assert dlion.knee({64: None}) is None
    assert dlion.pick_lr({0.01: 0.95, 0.02: 0.96, 0.05: 0.96}) == 0.02
    # with the pilots' mean accuracies: the one that rose early and stayed up wins over one
    # that collapsed and climbed back to a better final; a tie on the mean: the better final
    means: dict[float, float | None] = {0.01: 0.80, 0.02: 0.70, 0.05: 0.80}
    assert dlion.pick_lr({0.01: 0.95, 0.02: 0.96, 0.05: 0.97}, means) == 0.05
    assert dlion.pick_lr({0.01: 0.95, 0.02: 0.96, 0.05: 0.95}, means) == 0.01
    assert dlion.pick_lr({0.01: None, 0.02: 0.96, 0.05: 0.90}, means) == 0.05
    assert dlion.pick_lrs({"gaia": {0.01: 0.9, 0.02: 0.95}}, {"gaia": {0.01: 0.7, 0.02: 0.6}}) == {
        "gaia": 0.01
    }
    # the probe of 2026-11-29 (Ako on MNIST at b0 = 128): 0.02 fell from 0.70 to 0.49 and
    # still led over the epochs
    ako_01 = [[float(i), a] for i, a in enumerate((0.19, 0.35, 0.64, 0.75, 0.83, 0.88, 0.91))]
    ako_02 = [[float(i), a] for i, a in enumerate((0.28, 0.70, 0.49, 0.81, 0.90, 0.92, 0.94))]
    assert mean_accuracy(ako_01) == pytest.approx(0.65) and mean_accuracy([]) is None
    assert mean_accuracy(ako_02) == pytest.approx(0.72)
    curve = {
        "curve": [{"train_s": 3.0, "test_accuracy": 0.5}, {"train_s": 6.0, "test_accuracy": 0.9}]
    }
    assert dlion.time_to(curve, 0.8) == 6.0 and dlion.time_to(curve, 0.95) is None
    assert dlion.accuracy_at(curve, 5.0) == 0.5 and dlion.accuracy_at(curve, 2.0) is None


def test_local_recipes_carry_slowdowns_sites_and_the_arm() -> None:
    bed = dlion.Bed(dlion.BEDS["network"])
    text = dlion.recipe(PLAN, "gaia", bed, 'dataset = "digits"\n', 0.02, 800).format(seed=7)
    parsed = parse_recipe(loads(text))
    assert parsed.train.technique == "gaia" and parsed.run.seed == 7
    assert parsed.section("gaia", dlion_section("gaia")).sites == ["cloud-a"] * 3 + ["cloud-b"]
    assert "t_bs" not in text  # only DLion has T_bs
    compute = dlion.Bed(dlion.BEDS["compute"])
    text = dlion.recipe(PLAN, "t1-large", compute, 'dataset = "digits"\n', 0.02, 800)
    parsed = parse_recipe(loads(text.format(seed=1)))
    cfg = parsed.section("dlion", dlion_section("dlion"))
    assert cfg.lr_policy == "large" and cfg.bs_policy == "static" and cfg.t_bs == 800
    assert cfg.sites is None  # one site
    slow = [line for line in text.splitlines() if line.startswith("slowdown")]
    assert slow == ["slowdown = 1.0000"] + ["slowdown = 3.0000"] * 3
    knee = dlion.recipe(PLAN, "knee-512", compute, 'dataset = "digits"\n', 0.02, 800, b0=128)
    assert "batch_size = 128" in knee and "t_bs" not in knee and "batching = false" in knee
    sites = dlion.SITES_SPEC
    assert [s["hosts"][0]["cpu"] for s in sites["sites"]] == [0.7, 0.5, 0.4, 0.3]


def dlion_section(name: str) -> type:
    from edgetrain import techniques

    return techniques.section_models()[name]


def test_every_claim_and_section_from_literal_rows() -> None:
    """The whole plan's claims and report text from literal rows (the full reproduction is
    too long for the suite): R-DL-1 to R-DL-8, R-DL-8 marked as an extension."""

    def rows(arms: dict[str, dict[str, object]]) -> list[dict]:
        return [_row(a, s, **kw) for s in (1, 2) for a, kw in arms.items()]

    t1 = {a: {"final_accuracy": acc, "train_s": t / 100} for a, _, acc, t in dlion.TABLE1}
    res = {
        "r_dl_1": rows({"dlion": {"time_to_high": 7.0}, "dlion-nobatch": {"time_to_high": 10.0}}),
        "r_dl_2": rows({a: {"time_to_low": t} for a, t in
                        zip(dlion.R2_ARMS, (3.0, 12.0, 11.0, 4.0, 5.0), strict=True)}),
        "r_dl_3": rows({"dlion": {"accuracy_at_budget": 0.9, "wan_per_iteration": 10.0},
                        "gaia": {"accuracy_at_budget": 0.7}, "ako": {"accuracy_at_budget": 0.8},
                        "dlion-fullge": {"accuracy_at_budget": 0.9, "wan_per_iteration": 80.0}}),
        "r_dl_4": rows(t1),
        "r_dl_5": {"acc_1": {"64": 0.9, "128": 0.91, "256": 0.9, "512": 0.87, "1024": 0.8,
                             "2048": 0.7},
                   "acc_10": {"64": 0.97, "128": 0.97, "256": 0.96, "512": 0.94, "1024": 0.9,
                              "2048": 0.85},
                   "knee_1": 256, "knee_10": 256, "drop_10": 0.12, "n_train": 8000, "t_bs": 256},
        "r_dl_6": rows({a: {"time_to_low": (5.0 if a.endswith("partial") else 6.0)
                            + (2.0 if "late" in a or "none" in a else 0.0)}
                        for a in dlion.R6_ARMS}),
        "r_dl_7": rows({"we7-none": {"accuracy_at_budget": 0.80},
                        "we7-all": {"accuracy_at_budget": 0.85},
                        "we7-partial": {"accuracy_at_budget": 0.805},
                        "we7-one-sync": {"accuracy_at_budget": 0.84},
                        "we7-one-async": {"accuracy_at_budget": 0.86}}),
        "r_dl_8": rows({"sel-off": {"wan_per_iteration": 100.0, "iteration_s": 0.2,
                                    "site_sender": {"0": 0}, "site_receiver": {"0": 0}},
                        "sel-on": {"wan_per_iteration": 40.0, "iteration_s": 0.15,
                                   "site_sender": {"0": 60, "3": 30},
                                   "site_receiver": {"0": 20, "3": 50}}}),
        "pilot": {"seed": 0}, "targets": {"high": 0.9, "low": 0.8}, "testbeds": {"x": "| t |"},
    }  # fmt: skip
    claims = {c.id: c for c in dlion.build_claims(res, PLAN)}
    assert list(claims) == ["R-DL-1", "R-DL-1i", "R-DL-2", "R-DL-2b", "R-DL-3", "R-DL-3b",
                            "R-DL-3c", "R-DL-4", "R-DL-5", "R-DL-6", "R-DL-7",
                            "R-DL-8"]  # fmt: skip
    for cid in ("R-DL-1", "R-DL-2", "R-DL-2b", "R-DL-3", "R-DL-3b", "R-DL-3c", "R-DL-4",
                "R-DL-5", "R-DL-6", "R-DL-7"):  # fmt: skip
        assert claims[cid].direction_agrees is True, cid
    assert claims["R-DL-2"].ours is not None and claims["R-DL-2"].ours.median == pytest.approx(75)
    assert claims["R-DL-4"].ours is not None and claims["R-DL-4"].ours.median == pytest.approx(2.64)
    assert claims["R-DL-5"].ours is not None and claims["R-DL-5"].ours.median == 256
    r8 = claims["R-DL-8"]
    assert r8.claim.startswith("EXTENSION") and r8.direction_agrees is None
    assert r8.ours is not None and r8.ours.median == pytest.approx(40)
    assert r8.details["send_receive_frequency"]["0"]["send"] == pytest.approx(0.6)
    md = dict(dlion.sections(res, PLAN))
    assert (
        "R-DL-5: batch threshold" in md
        and "| 256 | 0.9000 | 0.9600 |" in md["R-DL-5: batch threshold"]
    )
    assert "R-DL-8 (extension): selective propagation" in md
    assert "Testbed verification: x" in md


def test_the_script_measures_5_seeds_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        dlion.main(["--help"])
    assert exc.value.code == 0
    assert "default 5" in " ".join(capsys.readouterr().out.split())


def test_the_default_plan_runs_the_ablations_on_fewer_seeds() -> None:
    import argparse

    args = argparse.Namespace(seeds=3, smoke=False, quick=False, testbed="emulated")
    p = dlion.plan_for(args)
    assert p.seeds == (1, 2, 3) and p.r1_seeds == (1, 2, 3, 4, 5) and p.side_seeds == (1, 2)
    assert PLAN.side_seeds == PLAN.seeds  # no reduction unless asked
    assert p.periods == (100, 10) and p.control and p.candidates[-1] == ("lenet5", 128)
    local = dlion.plan_for(argparse.Namespace(seeds=3, smoke=False, quick=True, testbed="local"))
    assert local.periods == (None,) and not local.control  # no quota on local processes


def test_a_run_name_is_refused_on_a_second_testbed() -> None:
    beds: dict[str, str] = {}
    dlion.same_bed(beds, "dlion", "dlion-compute-4")
    dlion.same_bed(beds, "dlion", "dlion-compute-4")  # R-DL-2 reuses R-DL-1's runs: same bed
    dlion.same_bed(beds, f"dlion{dlion.NETWORK_TAG}", "dlion-network-4")
    with pytest.raises(EdgetrainError, match="already ran on dlion-compute-4"):
        dlion.same_bed(beds, "dlion", "dlion-network-4")  # R-DL-3 untagged: the bug it guards


# ---------------------------------------------------------------------- regime first

# a profile at b0 = 32: 30 ms of forward and backward on the reference core, 1.6 MB of
# parameters (cnn2's size)
PROFILE = {
    "batch_sizes": [32],
    "layers": [
        {"name": "conv", "param_bytes": 400_000, "activation_bytes": 0, "fwd_s": 0.004,
         "bwd_s": 0.008},
        {"name": "fc", "param_bytes": 1_286_568, "activation_bytes": 0, "fwd_s": 0.006,
         "bwd_s": 0.012},
    ],
}  # fmt: skip


def _full_plan() -> dlion.Plan:
    import argparse

    return dlion.plan_for(argparse.Namespace(seeds=5, smoke=False, quick=False, testbed="emulated"))


def test_the_map_and_its_testbeds() -> None:
    p = _full_plan()
    keys = [s.key for s in dlion_regime.settings_of(p)]
    assert keys[:2] == ["lenet5-b32@compute-p100", "lenet5-b32@compute-p10"]
    assert keys[-1] == "lenet5-b128@network-p100" and len(keys) == 3 * 2 + 3
    short = dlion_regime.bed_spec(dlion_regime.Setting("cnn2", 32, "compute", 10))
    assert short.name == "dlion-compute-4-p10" and short.shares == (0.9, 0.3, 0.3, 0.3)
    facts = dlion_regime.facts_of(short, local=False)
    assert {h.quota_period_s for h in facts.hosts} == {0.01}
    default = dlion_regime.bed_spec(dlion_regime.Setting("cnn2", 32, "compute", 100))
    assert default is dlion.BEDS["compute"]
    assert {h.quota_period_s for h in dlion_regime.facts_of(default, local=False).hosts} == {0.1}
    assert {h.quota_period_s for h in dlion_regime.facts_of(default, local=True).hosts} == {None}


def test_the_regime_predicts_every_arm_and_the_period_matters() -> None:
    p = _full_plan()
    data = {"dataset": "digits"}
    got = {
        per: dlion_regime.predict_setting(
            p, dlion_regime.Setting("cnn2", 32, "compute", per), PROFILE, data, 0.02
        )
        for per in (100, 10)
    }
    for doc in got.values():
        assert doc["arms"]["dlion"]["batches"] == [64, 22, 21, 21]  # 3:1 capacities, total 128
        assert doc["arms"]["dlion-nobatch"]["batches"] == [32] * 4
        assert doc["bound"] == pytest.approx(100 / 3)
        assert doc["batching_cut"] == pytest.approx(
            100 * (1 - doc["arms"]["dlion"]["sample_s"] / doc["arms"]["dlion-nobatch"]["sample_s"])
        )
    # the period reaches the cost model: the slow workers' bursts differ at 100 and 10 ms
    assert got[100]["arms"]["ako"]["iteration_s"] != got[10]["arms"]["ako"]["iteration_s"]
    net = dlion_regime.predict_setting(
        p, dlion_regime.Setting("cnn2", 32, "network", 100), PROFILE, data, 0.02
    )
    assert net["batching_cut"] == pytest.approx(0.0) and net["predicts_gain"] is False  # equal
    assert net["bound"] == pytest.approx(0.0)


def test_the_rule_chooses_the_largest_predicted_cut_and_the_least_as_control() -> None:
    pred: dict[str, dict[str, Any]] = {
        "a@compute-p100": {"bed": "compute", "batching_cut": 2.0},
        "a@compute-p10": {"bed": "compute", "batching_cut": 25.0},
        "b@compute-p100": {"bed": "compute", "batching_cut": 25.0},
        "b@compute-p10": {"bed": "compute", "batching_cut": None},
        "a@network-p100": {"bed": "network", "batching_cut": 40.0},  # never R-DL-1's
    }
    assert dlion_regime.choose(pred) == ("a@compute-p10", "b@compute-p10")  # ties: the first
    # the model times no quota: a tie between periods goes to the shorter
    tie = {
        "b@compute-p100": {"bed": "compute", "batching_cut": 25.0, "period_ms": 100},
        "b@compute-p10": {"bed": "compute", "batching_cut": 25.0, "period_ms": 10},
        "c@compute-p100": {"bed": "compute", "batching_cut": 25.0, "period_ms": 100},
        "a@compute-p10": {"bed": "compute", "batching_cut": 2.0, "period_ms": 10},
    }
    assert dlion_regime.choose(tie) == ("b@compute-p10", "a@compute-p10")
    assert dlion_regime.choose({**tie, "d@local": {"bed": "compute", "batching_cut": 25.0}})[0] == (
        "d@local"
    )
    assert dlion_regime.choose({"x": {"bed": "compute", "batching_cut": 1.0}}) == ("x", None)
    with pytest.raises(EdgetrainError, match="no compute setting"):
        dlion_regime.choose({"n": {"bed": "network", "batching_cut": 1.0}})


def _setting_doc(bed: str, cut: float, dlion_us: float, base_us: float) -> dict[str, Any]:
    arms = {
        "dlion": {"sample_s": dlion_us * 1e-6, "batches": [64, 22, 21, 21], "notes": ["n"]},
        "dlion-nobatch": {"sample_s": base_us * 1e-6, "batches": [32] * 4},
        "gaia": {"sample_s": 500e-6, "batches": [32] * 4},
        "ako": {"sample_s": 800e-6, "batches": [32] * 4},
    }
    return {"workload": "cnn2-b32", "bed": bed, "batching_cut": cut, "bound": 33.3, "arms": arms}


def test_regime_claims_set_measured_against_predicted() -> None:
    regime = {
        "chosen": "cnn2-b32@compute-p10",
        "control": "cnn2-b32@compute-p100",
        "settings": {
            "cnn2-b32@compute-p10": _setting_doc("compute", 25.0, 600, 800),
            "cnn2-b32@compute-p100": _setting_doc("compute", 2.0, 780, 800),
            "cnn2-b32@network-p100": _setting_doc("network", 0.0, 400, 400),
        },
    }

    def r(arm: str, seed: int, us: float, run: str = "") -> dict[str, Any]:
        return _row(arm, seed, samples_per_s=1e6 / us, run=run or f"{arm}-s{seed}")

    res = {
        "regime": regime,
        # measured: 25% and 20% cuts on the chosen setting; R-DL-2 reuses R-DL-1's runs
        "r_dl_1": [r("dlion", 1, 600), r("dlion-nobatch", 1, 800), r("dlion", 2, 640),
                   r("dlion-nobatch", 2, 800)],
        "r_dl_2": [r("dlion", 1, 600), r("gaia", 1, 550), r("ako", 1, 800)],
        # the control: the model predicted no gain, and a 10% cut was measured
        "control": [r("dlion", 1, 720, "dlion-ctl-s1"), r("dlion-nobatch", 1, 800, "x")],
        "r_dl_3": [r("dlion", 1, 480, "dlion-net-s1"), r("gaia", 1, 500, "gaia-net-s1")],
    }  # fmt: skip
    rows = dlion_regime_claims.setting_rows(res)
    assert len(rows["cnn2-b32@compute-p10"]) == 6  # R-DL-2's dlion row is R-DL-1's
    claims = {c.id: c for c in dlion_regime_claims.regime_claims(res)}
    assert list(claims) == [
        "R-DL-R cnn2-b32@compute-p10", "R-DL-R cnn2-b32@compute-p100", "R-DL-RE"
    ]  # fmt: skip
    head = claims["R-DL-R cnn2-b32@compute-p10"]
    assert head.ours is not None and (head.ours.min, head.ours.max) == pytest.approx((20, 25))
    assert head.direction_agrees is True and head.paper_value == ">= 5%"
    control = claims["R-DL-R cnn2-b32@compute-p100"]
    assert control.paper_value == "< 5%" and control.direction_agrees is False
    # every run predicted, 6 + 2 + 2: |errors| 0 (six), 1/15 (dlion at 640 against 600), 0.1
    # (gaia at 550 against 500), 1/13 (the control's dlion at 720 against 780), 0.2 (dlion at
    # 480 against 400 on the network)
    err = claims["R-DL-RE"]
    got = sorted(abs(e["error"]) for e in err.details["runs"])
    assert got == pytest.approx([0.0] * 6 + [1 / 15, 1 / 13, 0.1, 0.2])
    assert err.ours is not None and err.ours.median == pytest.approx(0.0, abs=1e-9)
    assert err.direction_agrees is True
    table = dlion_regime_claims.regime_table(res)
    assert (
        "| cnn2-b32@compute-p10 | dlion | 64/22/21/21 | 600.0 | 620.0 | 25.0 | 22.5 | 33.3 |"
        in (table)
    )
    assert "| cnn2-b32@network-p100 | ako | 32/32/32/32 | 800.0 | - | - | - | - |" in table


def test_the_report_names_the_chosen_workload_not_the_plans_fallback() -> None:
    from dataclasses import replace

    from reproductions.dlion_claims import setting

    # the full plan's model is cnn2 until the regime chooses; the report of 2026-11-29 said
    # "cnn2" in every deviation where the regime had chosen LeNet-5 at b0 = 128
    chosen = replace(PLAN, model="lenet5", b0=128, local=False)
    said = setting(chosen)
    assert said.startswith("LeNet-5 at b0 = 128 on the MNIST test set (8,000 train")
    assert "cnn2" not in said and "; emulated;" in said
    assert setting(replace(PLAN, dataset="digits", model="lenet5")).startswith(
        "LeNet-5 at b0 = 32 on digits"
    )


def test_a_kept_regime_of_another_plan_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ap = cli.parser("dlion", "doc", quick="q", smoke="s", seeds=3)
    ap.add_argument("--testbed", default="emulated")
    quick, full = (dlion.plan_for(cli.parse(ap, a)) for a in (["--quick"], []))
    keys = [s.key for s in dlion_regime.settings_of(quick)]
    doc = {"dataset": "digits", "settings": dict.fromkeys(keys[:-1], {})}
    (tmp_path / "regime.json").write_text(json.dumps(doc))
    with pytest.raises(EdgetrainError, match="not this plan's " + keys[-1]):
        dlion_regime.check_kept_regime(quick, tmp_path)
    doc["settings"] = dict.fromkeys(keys, {})
    (tmp_path / "regime.json").write_text(json.dumps(doc))
    dlion_regime.check_kept_regime(quick, tmp_path)  # the plan that wrote it resumes
    # the default plan maps the same settings, on MNIST
    with pytest.raises(EdgetrainError, match="for dataset 'digits', not this plan's 'mnist'"):
        dlion_regime.check_kept_regime(full, tmp_path)
    doc["settings"] = dict.fromkeys(keys[:-1], {})  # another plan's map
    (tmp_path / "regime.json").write_text(json.dumps(doc))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert dlion.main(["--quick", "--out", str(tmp_path)]) == 2  # one line, nothing run
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"not this plan's {keys[-1]}" in err[0] and "--out" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before
