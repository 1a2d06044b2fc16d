"""The DynaComm reproduction's whole path at smoke size: the four schedules as real runs,
interleaved and resumable, into paper-vs-edgetrain.{md,json} of the shared shape."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from edgetrain.experiment import cli, report
from reproductions import dynacomm, dynacomm_claims, dynacomm_trace


@pytest.mark.timeout(300)
def test_smoke_reproduction_writes_the_report_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert dynacomm.main(["--smoke", "--out", str(out), "--format", "json"]) == 0
    doc = json.loads((out / "paper-vs-edgetrain.json").read_text())
    assert doc["paper"] == "dynacomm"
    ids = {c["id"] for c in doc["claims"]}
    assert {"R-DC1", "R-DC1c", "R-DC5"} <= ids
    for claim in doc["claims"]:
        assert set(claim) >= {
            "id", "claim", "paper_value", "ours", "unit", "seeds", "direction_agrees",
            "deviations",
        }  # fmt: skip
    same = next(c for c in doc["claims"] if c["id"] == "R-DC5")
    assert same["ours"]["median"] == 1 and same["direction_agrees"]  # one model for four schedules
    assert len(doc["runs"]) == 4 and {r["seed"] for r in doc["runs"]} == {1}
    # the link fit is sane: in the sequential schedule, communication per iteration (fitted
    # from the run's transmissions) cannot exceed the measured iteration; a fit across a few
    # header bytes once made it 10,000 times longer
    seq = next(r for r in doc["runs"] if "/sequential-" in r["run"])
    assert 0 < seq["communication_s"] <= 2 * seq["iteration_s"], seq
    share = next(c for c in doc["claims"] if c["id"] == "R-DC1b")
    assert share["ours"]["max"] <= 1 or "measuring error" in share["deviations"]
    one = next(c for c in doc["claims"] if c["id"] == "R-DC1")  # over seeds, at one setting
    assert one["details"]["per_seed"].keys() == {"1"} and "mlp at 100 Mbit/s" in one["claim"]
    assert one["ours"]["median"] == one["details"]["per_seed"]["1"]
    md = (out / "paper-vs-edgetrain.md").read_text()
    assert "| R-DC1 |" in md and "## Iteration time per setting" in md
    assert "## Setting map: predicted and measured cut against sequential" in md
    # resumable: a second pass finds every run done and launches nothing
    mtimes = {p: p.stat().st_mtime for p in (out / "runs").glob("*/report/summary.json")}
    assert dynacomm.main(["--smoke", "--out", str(out), "--format", "json"]) == 0
    assert {p: p.stat().st_mtime for p in mtimes} == mtimes


def test_a_value_above_its_bound_is_reported_as_a_measuring_error() -> None:
    assert report.above_bound([0.5, None, 0.99], 1.0, "why") == ""
    note = report.above_bound([0.5, 3113.0], 1.0, "the ceiling is the most overlap can save")
    assert "1 value(s) above the bound 1" in note and "measuring error" in note
    assert "3.11e+03" in note


def _row(seed: int, it: float, sha: str, **kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "seed": seed, "iteration_s": it, "model_sha256": sha, "ceiling": 0.4,
        "replan_share_max": None,
    }  # fmt: skip
    return {**base, **kw}


def test_schedules_are_compared_within_a_seed() -> None:
    # two seeds train two models; within each seed the four schedules agree
    entry = {
        "results": {
            t: [_row(1, 1.0, "a"), _row(2, 1.0, "b")]
            for t in ("sequential", "lbl", "ibatch", "dynacomm")
        }
    }
    same = dynacomm.same_weights([entry])
    assert same == {
        "identical": True,
        "distinct": 1,
        "shas": {s: dict.fromkeys(dynacomm.SCHEDULES, m) for s, m in (("1", "a"), ("2", "b"))},
    }
    entry["results"]["lbl"][1] = _row(2, 1.0, "c")  # one schedule of seed 2 differs
    assert dynacomm.same_weights([entry])["distinct"] == 2


SETTING = {"model": "m", "bandwidth_mbit": 100, "trainers": 3, "batch": 64}


def _setting(
    hold: float, dyn: dict[int, float], core: float = 0.45, **kw: object
) -> dict[str, Any]:
    """Sequential 1.0 s, lbl 0.8, ibatch 0.75 at every seed; DynaComm as given per seed."""
    times = {"sequential": 1.0, "lbl": 0.8, "ibatch": 0.75}
    results = {t: [_row(s, x, "a", **kw) for s in dyn] for t, x in times.items()}
    results["dynacomm"] = [_row(s, x, "a", **kw) for s, x in dyn.items()]
    return {"setting": {**SETTING, "hold_ms": hold, "core": core}, "results": results}


def test_claims_are_over_seeds_not_settings() -> None:
    # one 0.45-core setting whose seeds cut 35, 25 and 30%; one whose seeds cut 10, 12, 14%
    results = {
        "settings": {
            "a": _setting(0.0, {1: 0.65, 2: 0.75, 3: 0.70}),
            "b": _setting(0.0, {1: 0.90, 2: 0.88, 3: 0.86}),
        }
    }
    claims = dynacomm.build_claims(results, dynacomm.plan_for(_ns()))
    cuts = [c for c in claims if c.id == "R-DC1"]
    assert len(cuts) == 2  # a row per setting, never a [min, max] across settings
    first = cuts[0]
    assert first.ours is not None and first.seeds == [1, 2, 3]
    assert (first.ours.median, first.ours.min, first.ours.max) == pytest.approx((30, 25, 35))
    assert first.details["per_seed"] == pytest.approx({"1": 35.0, "2": 25.0, "3": 30.0})
    assert first.direction_agrees is True  # every seed's cut is positive
    second = cuts[1].ours
    assert second is not None and (second.min, second.max) == pytest.approx((10, 14))
    (best,) = [c for c in claims if c.id == "R-DC1d"]
    # the best setting's seeds: its median of 30% meets the goal, its spread is published
    assert best.ours is not None and (best.ours.min, best.ours.max) == pytest.approx((25, 35))
    assert best.direction_agrees is True and best.details["setting"] == first.details["setting"]
    share = next(c for c in claims if c.id == "R-DC1b")
    assert share.ours is not None and share.ours.median == pytest.approx(0.75)  # 30% of 0.4
    assert share.direction_agrees is None  # 0.45 core: the map's other side, not the goal
    vs_best = next(c for c in claims if c.id == "R-DC1c")  # 0.65 / 0.75 - 1 at seed 1
    assert vs_best.details["per_seed"]["1"] == pytest.approx(100 * (0.65 / 0.75 - 1))
    assert vs_best.direction_agrees is True  # median 0.70 / 0.75: ahead of the best


def test_goals_from_literal_rows() -> None:
    # >= 0.9 core: seeds cut 35 and 33% of a 0.4 ceiling (0.875, 0.825 of it); with a round
    # trip, lbl (0.8 s) is slower than DynaComm at every seed
    headline = _setting(0.0, {1: 0.65, 2: 0.67}, core=0.9, prediction_error=0.05)
    held = _setting(10.0, {1: 0.7, 2: 0.72})
    for t, rows in headline["results"].items():
        for r in rows:
            r["replan_share_max"] = 0.002 if t == "dynacomm" else None
            if t == "lbl":
                r["prediction_error"] = 0.25
    held["results"]["dynacomm"][1]["replan_share_max"] = 0.02
    results = {"settings": {"a": headline, "b": held}}
    claims = dynacomm.build_claims(results, dynacomm.plan_for(_ns()))
    by_id: dict[str, list[report.Claim]] = {}
    for c in claims:
        by_id.setdefault(c.id, []).append(c)
    (share,) = by_id["R-DC1b"]
    assert share.ours is not None and share.ours.median == pytest.approx(0.85)
    assert share.direction_agrees  # a median of at least 0.8 of the ceiling at 0.9 core
    (lbl,) = by_id["R-DC2b"]
    assert lbl.direction_agrees and lbl.seeds == [1, 2]
    (replan,) = by_id["R-DC4b"]  # per seed, the largest epoch over the seed's runs
    assert replan.ours is not None and (replan.ours.min, replan.ours.max) == pytest.approx(
        (0.2, 2.0)
    )
    assert replan.direction_agrees is False  # 2% of an epoch at seed 2: over the 1% goal
    per_schedule = {c.claim.rsplit(", ", 1)[-1]: c for c in by_id["R-DC3"]}
    assert per_schedule["sequential"].direction_agrees is True  # median 5%
    assert per_schedule["lbl"].direction_agrees is False  # median 25%
    assert per_schedule["sequential"].details["per_seed"] == {"1": 0.05, "2": 0.05}


def _ns() -> argparse.Namespace:
    return argparse.Namespace(seeds=1, smoke=False, quick=True)


def test_the_full_plan_measures_at_least_three_seeds() -> None:
    from edgetrain.errors import EdgetrainError

    def ns(seeds: int) -> argparse.Namespace:
        return argparse.Namespace(seeds=seeds, smoke=False, quick=False)

    with pytest.raises(EdgetrainError, match="at least 3 seeds"):
        dynacomm.plan_for(ns(2))
    assert dynacomm.plan_for(ns(5)).seeds == (1, 2, 3, 4, 5)
    assert dynacomm.plan_for(ns(5)).trace_seeds == (1, 2, 3)
    ap = cli.parser("dynacomm", "doc", quick="q", smoke="s", seeds=5)
    assert cli.parse(ap, []).seeds == 5  # the script's default


def _epochs(times: list[tuple[float, float]]) -> list[dict[str, object]]:
    """Trainer 1's epochs from (end clock, iteration s), each 10 s of training, no evaluation."""
    return [
        {"worker": 1, "epoch": k, "t": t, "epoch_s": 10.0, "eval_s": 0.0, "iteration_s": it}
        for k, (t, it) in enumerate(times, start=1)
    ]


def test_epochs_are_placed_in_the_trace_phases_by_their_clock() -> None:
    ph = dynacomm_trace.Phases(300, drop_at=60.0, back_at=120.0, epochs=9)
    assert dynacomm_trace.phase_of({"t": 50.0, "epoch_s": 10.0}, ph) == "before"
    assert dynacomm_trace.phase_of({"t": 62.0, "epoch_s": 10.0}, ph) is None  # straddles
    assert dynacomm_trace.phase_of({"t": 80.0, "epoch_s": 10.0, "eval_s": 2.0}, ph) == "drop"
    assert dynacomm_trace.phase_of({"t": 135.0, "epoch_s": 10.0}, ph) == "after"
    assert dynacomm_trace.phase_of({"epoch_s": 10.0}, ph) is None  # no clock
    epochs = _epochs([(20, 9.0), (35, 1.0), (50, 1.2), (75, 4.0), (110, 5.0), (140, 1.0)])
    got = dynacomm_trace.by_phase(epochs, ph)  # epoch 1 (the start probe) left out
    assert got == {"before": pytest.approx(1.1), "drop": 4.5, "after": 1.0}


def test_the_trace_is_sized_from_the_pilot() -> None:
    # C 0.1 s, M 0.2 s at 300 Mbit/s: 0.3 s an iteration, 3.1 s at 20 Mbit/s
    ph = dynacomm_trace.phases_for(300, 0.1, 0.2)
    assert ph.drop_at == pytest.approx(15 + 30 * 0.3)  # the start, then three epochs of ten
    assert ph.back_at == pytest.approx(ph.drop_at + 20 * 3.1, abs=0.1)
    assert ph.epochs == 13  # past the return even at twice the sequential pace
    assert dynacomm_trace.phases_for(300, None, 0.2).drop_at == 60.0  # no pilot: 60 s phases
    changes = dynacomm_trace.trace_changes(ph, 2)
    assert [(c["at"], c["link"], c["rate"]) for c in changes[:3]] == [
        (0, "trainer-1", "300mbit"), (0, "trainer-2", "300mbit"),
        (ph.drop_at, "trainer-1", "20mbit"),
    ]  # fmt: skip
    keys = dynacomm_trace.arm_plan_keys(Path("/o/trace-plan/k/plans/trace.json"), 300)
    assert keys == {"plan": "/o/trace-plan/k/plans/trace.json", "plan_bandwidth": "300mbit"}
    assert dynacomm_trace.data_iterations(0.2) == 11  # 0.8 x 13 = 10 iterations an epoch


def _arm(train: float, before: float, drop: float) -> dict[str, object]:
    return {"train_s": train, "phases": {"before": before, "drop": drop, "after": before}}


def test_trace_claims_compare_phases_seed_by_seed() -> None:
    trace = {
        "seeds": {
            "1": {"replanned": _arm(100, 1.0, 3.0), "frozen": _arm(120, 1.02, 4.0)},
            "2": {"replanned": _arm(110, 1.0, 3.2), "frozen": _arm(121, 0.97, 3.5)},
            "3": {"replanned": _arm(90, 1.0, 3.0), "frozen": _arm(100, 1.0, 2.9)},
        }
    }
    saved, before, drop = dynacomm_claims.trace_claims(trace)
    assert saved.id == "R-DC4" and saved.seeds == [1, 2, 3]
    assert saved.ours is not None and saved.ours.min == pytest.approx(100 * (1 - 110 / 121))
    assert saved.direction_agrees is True
    assert before.id == "R-DC4c" and before.ours is not None
    assert (before.ours.min, before.ours.max) == pytest.approx((0.97, 1.02))
    assert before.direction_agrees is True  # level: the same plan file before the drop
    assert drop.id == "R-DC4d" and drop.details["per_seed"]["1"] == pytest.approx(4 / 3)
    assert drop.direction_agrees is False  # seed 3's frozen plan was faster in the drop


def test_an_arm_the_trace_stops_is_reported_not_fatal() -> None:
    error = (
        'run trace-lbl-x-s1 did not complete: {"error": "run failed: 3 of 4 workers failed: '
        "worker 1 (host trainer-1): stopped heartbeating (nothing for 15.0 s, limit 15.0 s) "
        '(log: /tmp/w1.log)", "fix": null}'
    )
    replanned = {"train_s": 100.0, "phases": {"before": 1.0, "drop": 3.0, "after": 1.1}}
    trace = {
        "phases": {"rate": 300, "low": 20, "drop_at": 60.0, "back_at": 120.0, "epochs": 13},
        "seeds": {
            "1": {
                "replanned": replanned | {"per_epoch": _epochs([(50, 1.0)])},
                "lbl": {"run": "trace-lbl-x-s1", "failed": error},
            }
        },
    }
    text = dynacomm.trace_text(trace)
    assert "300 Mbit/s until 60 s, 20 Mbit/s until 120 s" in text
    assert "| 1 | replanned | 100.0 | 1.000 / 3.000 / 1.100 |" in text
    assert (
        "| 1 | lbl | did not complete: run failed: 3 of 4 workers failed: worker 1 (host "
        "trainer-1): stopped heartbeating (nothing for 15.0 s, limit 15.0 s) | - |"
    ) in text
    assert "/tmp/w1.log" not in text
    (_, _, drop) = dynacomm_claims.trace_claims(trace)
    assert "lbl s1 did not complete" in drop.deviations


@pytest.mark.timeout(180)
def test_the_trace_plan_is_made_once_before_the_runs(tmp_path: Path) -> None:
    from edgetrain.experiment.beds import Bed, BedSpec

    said: list[str] = []
    bed = Bed(BedSpec("local"))  # local processes: the profile runs here
    path, plan = dynacomm_trace.trace_plan(
        tmp_path, "k", "lenet5", 16, 300, 0.002, bed, said.append
    )
    assert path.is_absolute() and path.is_file()
    entry = plan["dynacomm_at_rate"]
    assert set(entry) >= {"forward_cuts", "backward_cuts", "iteration_s"}
    doc = json.loads(path.read_text())
    assert len(doc["bandwidths"]) == 2  # the first phase's rate and the drop's
    assert plan["profile_host"] == "trainer-1" and plan["dt_s"] == 0.002 and len(said) == 1
    again, same = dynacomm_trace.trace_plan(
        tmp_path, "k", "lenet5", 16, 300, 0.002, bed, said.append
    )
    assert (again, same) == (path, plan) and len(said) == 1  # kept: not profiled again
