"""The mcPipe reproduction: its whole path at smoke size (real runs, interleaved, resumable,
into paper-vs-edgetrain.{md,json} of the shared shape), its claims from literal rows, and the
recipes and hosts files it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgetrain.tomlconfig import loads
from reproductions import mcpipe, mcpipe_claims
from reproductions.mcpipe_recipes import (
    MLP_WIDE,
    RunSpec,
    Workload,
    hosts_text,
    recipe,
    slots,
)
from tests.helpers.vision import needs_torchvision


@pytest.mark.timeout(400)
def test_smoke_reproduction_writes_the_report_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert mcpipe.main(["--smoke", "--out", str(out), "--format", "json"]) == 0
    doc = json.loads((out / "paper-vs-edgetrain.json").read_text())
    assert doc["paper"] == "mcpipe"
    claims = {c["id"]: c for c in doc["claims"]}
    assert {"R-MP-0a", "R-MP-0b", "R-MP-2a", "R-MP-M1", "R-MP-M2", "R-MP-G2"} <= set(claims)
    for claim in doc["claims"]:
        assert set(claim) >= {
            "id", "claim", "paper_value", "ours", "unit", "seeds", "direction_agrees",
            "deviations",
        }  # fmt: skip
    # mcPipe equals PipeDream per microbatch in one process, the launched run equals the
    # simulator, and the two arms' snapshots after the same microbatches are bit-identical
    assert claims["R-MP-0a"]["direction_agrees"] and claims["R-MP-0b"]["direction_agrees"]
    assert claims["R-MP-2a"]["ours"]["min"] == 1.0
    # the accountant measures the general bound to the byte, and at a window of 4 stage 0 of
    # the MLP holds well under PipeDream's versions with the same final weights
    assert claims["R-MP-M2"]["ours"] == {"median": 1.0, "min": 1.0, "max": 1.0}
    assert claims["R-MP-M1"]["direction_agrees"] is True
    assert claims["R-MP-M1"]["ours"]["median"] >= 2.5
    results = doc["results"]
    assert results["pilot"]["seed"] == 0 and results["targets"]["late"] > 0  # fixed by the pilot
    assert set(results["pilots"]) == {"mcpipe", "local"}  # two pilots fix the targets
    assert [(r["arm"], r["seed"]) for r in doc["runs"]] == [("pipedream", 1), ("mcpipe", 1)]
    # the report names the commit that made it
    assert doc["commit"] and isinstance(doc["commit_dirty"], bool)
    # regime first: the prediction was written before the runs, from a profile, and the cost
    # model's error over the runs it predicted is a claim
    regime = json.loads((out / "regime.json").read_text())
    assert regime["before_measured_runs"] and regime["chosen"] == "mlp-256-256-256"
    arms = regime["settings"]["mlp-256-256-256-n2-1gbit"]["arms"]
    assert set(arms) == {"local", "pipedream", "mcpipe"}
    assert all(a["iteration_s"] > 0 for a in arms.values())
    first_run = min(p.stat().st_mtime for p in (out / "runs").glob("acc2-*/report/summary.json"))
    assert (out / "regime.json").stat().st_mtime < first_run
    assert "R-MP-RE" in claims and len(claims["R-MP-RE"]["details"]["runs"]) == 2
    # calibrated on the two pilots, after them and before the first measured run
    cal = json.loads((out / "regime-calibrated.json").read_text())
    assert cal["before_measured_runs"] and set(cal["calibrated_on"]) == {"local", "mcpipe"}
    assert all(c["compute_scale"] > 0 for c in cal["calibrated_on"].values())
    assert set(cal["settings"]["mlp-256-256-256-n2-1gbit"]["arms"]) == {
        "local", "pipedream", "mcpipe"
    }  # fmt: skip
    pilots = [
        out / "runs" / f"pilot-2-{t}-s0" / "report" / "summary.json" for t in ("mcpipe", "local")
    ]
    assert max(p.stat().st_mtime for p in pilots) < (out / "regime-calibrated.json").stat().st_mtime
    assert (out / "regime-calibrated.json").stat().st_mtime < first_run
    assert len(claims["R-MP-REc"]["details"]["runs"]) == 2
    md = (out / "paper-vs-edgetrain.md").read_text()
    assert "| R-MP-M1 |" in md and "## Memory per stage" in md and "## Pilots" in md
    assert "## Regime: the cost model's prediction" in md and "Made by commit" in md
    # resumable: a second pass finds every run done and launches nothing
    mtimes = {p: p.stat().st_mtime for p in (out / "runs").glob("*/report/summary.json")}
    assert len(mtimes) == 6  # two memory runs, two pilots, two arms
    regime_mtime = (out / "regime.json").stat().st_mtime
    cal_mtime = (out / "regime-calibrated.json").stat().st_mtime
    assert mcpipe.main(["--smoke", "--out", str(out), "--format", "json"]) == 0
    assert {p: p.stat().st_mtime for p in mtimes} == mtimes
    assert (out / "regime.json").stat().st_mtime == regime_mtime  # never rewritten
    assert (out / "regime-calibrated.json").stat().st_mtime == cal_mtime


def _acc(arm: str, seed: int, n: int, early: float | None, late: float | None, at: float) -> dict:
    return {"arm": arm, "seed": seed, "topology": n, "time_to_early": early, "time_to_late": late,
            "at_budget": at, "final_train_s": 95.0, "curve": [], "stages": []}  # fmt: skip


def test_accuracy_claims_from_literal_rows() -> None:
    rows = [
        _acc("local", 1, 2, 10.0, None, 0.90), _acc("dataparallel", 1, 2, 30.0, None, 0.85),
        _acc("pipedream", 1, 2, 4.0, 40.0, 0.95), _acc("greedy", 1, 2, 3.0, None, 0.93),
        _acc("mcpipe", 1, 2, 5.0, 50.0, 0.94),
    ]  # fmt: skip
    early = mcpipe_claims._greedy_early(rows, 2)
    assert early.ours is not None and early.ours.median == pytest.approx(0.75)
    assert early.direction_agrees is True
    late = mcpipe_claims._greedy_late(rows, 2)
    assert late.ours is not None and late.ours.median == pytest.approx(2.0)
    behind = mcpipe_claims._behind(rows, 2, 90.0)
    # neither Local nor data parallelism reached the target: counted with their 95 s
    assert behind.ours is not None and behind.ours.median == pytest.approx(95.0 / 50.0)
    assert behind.direction_agrees is True and "lower bound" in behind.deviations


def _curve(*points: tuple[float, float, int]) -> list[dict]:
    return [{"train_s": t, "accuracy": a, "microbatches": m, "sha256": None} for t, a, m in points]


def test_targets_from_two_pilots_sit_under_the_lower_plateau() -> None:
    from reproductions.mcpipe_accuracy import targets_of

    # budget 80 s: a quarter at 20 s, half at 40 s; the second half's best is the plateau
    fast = _curve((10, 0.80, 100), (20, 0.90, 200), (40, 0.95, 400), (60, 0.96, 600))
    slow = _curve((10, 0.70, 50), (20, 0.85, 100), (40, 0.93, 200), (80, 0.935, 400))
    got = targets_of([fast, slow], 80.0)
    # early: the lower at 20 s; late: the lower at 40 s (0.93), capped at 0.935 - 0.005
    assert got == {"early": 0.85, "late": 0.93}
    # one lucky pilot alone would put late at 0.95; with a plateau of 0.952 the cap binds
    lucky = _curve((20, 0.90, 200), (40, 0.95, 400), (80, 0.952, 800))
    assert targets_of([lucky], 80.0) == {"early": 0.9, "late": 0.947}
    assert targets_of([[]], 80.0) == {}


def test_regime_claims_set_measured_direction_against_prediction() -> None:
    from types import SimpleNamespace

    from reproductions.mcpipe_regime import choose, speedups
    from reproductions.mcpipe_regime_claims import prediction_errors, regime_claims

    arms = {"local": {"iteration_s": 0.1}, "mcpipe": {"iteration_s": 0.05}, "dp": {}}
    assert speedups(arms) == {"local": 1.0, "mcpipe": 2.0, "dp": None}
    predicted = {
        "a-n3-1gbit": {"speedup": {"mcpipe": 1.4}},
        "b-n3-1gbit": {"speedup": {"mcpipe": 1.9}},
    }
    assert choose(predicted, ["a", "b"], 3) == "b"
    assert choose(predicted, ["a", "c"], 3) == "a"

    def row(arm: str, seed: int, n: int, seconds: float, mbs: int, **kw: object) -> dict:
        point = {"train_s": seconds, "accuracy": 0.9, "microbatches": mbs}
        return {"arm": arm, "seed": seed, "topology": n, "curve": [point], "run": f"{arm}{seed}",
                **kw}  # fmt: skip

    settings = {
        "b-n2-1gbit": {
            "speedup": {"local": 1.0, "mcpipe": 1.5},
            "arms": {"local": {"iteration_s": 0.1}, "mcpipe": {"iteration_s": 0.0625}},
        },
        "b-n2-10mbit": {
            "speedup": {"local": 1.0, "mcpipe": 0.5},
            "arms": {"local": {"iteration_s": 0.1}, "mcpipe": {"iteration_s": 0.2}},
        },
    }
    res = {
        "regime": {"chosen": "b", "settings": settings},
        # Local 0.1 s per microbatch; mcPipe 0.05 on 1 Gbit/s, 0.25 on 10 Mbit/s
        "accuracy": [row("local", s, 2, 10.0, 100) for s in (1, 2)]
        + [row("mcpipe", s, 2, 10.0, 200) for s in (1, 2)],
        "extra": [row("mcpipe", s, 2, 10.0, 40, setting="slow", run=f"x{s}") for s in (1, 2)],
    }
    p = SimpleNamespace(topologies=(2,), extra=(("slow", None, 2, "10mbit", ("mcpipe",)),))
    got = {c.id: c for c in regime_claims(res, p)}
    fast, slow = got["R-MP-R b-n2-1gbit"], got["R-MP-R b-n2-10mbit"]
    assert fast.ours is not None and fast.ours.median == pytest.approx(2.0)
    assert fast.direction_agrees is True and fast.paper_value == "> 1"
    assert slow.ours is not None and slow.ours.median == pytest.approx(0.4)
    assert slow.direction_agrees is True and slow.paper_value == "<= 1"
    errors = {(e["setting"], e["arm"], e["seed"]): e["error"] for e in prediction_errors(res, p)}
    # Local is measured once and stands beside both settings: counted once
    assert errors[("b-n2-1gbit", "local", 1)] == pytest.approx(0.0)
    assert errors[("b-n2-1gbit", "mcpipe", 1)] == pytest.approx(0.05 / 0.0625 - 1)
    assert errors[("b-n2-10mbit", "mcpipe", 2)] == pytest.approx(0.25 / 0.2 - 1)
    assert len(errors) == 6
    assert got["R-MP-RE"].direction_agrees is False  # median 0.2 > 0.15
    assert "R-MP-REc" not in got  # no calibration, no claim
    # calibrated on the pilots: Local exact, mcPipe 0.05 against 0.055 on 1 Gbit/s
    calibrated = {
        "b-n2-1gbit": {
            "speedup": {"local": 1.0, "mcpipe": 0.1 / 0.055},
            "arms": {"local": {"iteration_s": 0.1}, "mcpipe": {"iteration_s": 0.055}},
        }
    }
    on = {"mcpipe": {"compute_scale": 1.5, "replay_scale": 1.2, "outside_ms": 1.0}}
    res["regime_calibrated"] = {"chosen": "b", "settings": calibrated, "calibrated_on": on}
    rec = {c.id: c for c in regime_claims(res, p)}["R-MP-REc"]
    assert rec.ours is not None and len(rec.details["runs"]) == 4
    assert rec.ours.median == pytest.approx((0.05 / 0.055 - 1) * -1 / 2)  # 0, 0, 0.091, 0.091
    assert rec.direction_agrees is True and "compute x1.50" in rec.deviations


def test_the_pipeline_predicted_fastest_against_local_to_the_late_target() -> None:
    from types import SimpleNamespace

    from reproductions.mcpipe_regime_claims import regime_claims

    def row(arm: str, seed: int, late: float | None, **kw: object) -> dict:
        point = {"train_s": 20.0, "accuracy": 0.97, "microbatches": 400}
        return {"arm": arm, "seed": seed, "topology": 2, "curve": [point], "run": f"{arm}{seed}",
                "time_to_late": late, "final_train_s": 20.0, **kw}  # fmt: skip

    settings = {
        "b-n2-1gbit": {"speedup": {"local": 1.0, "mcpipe": 1.2, "greedy": 1.4, "dp": 0.1}},
        "b-n2-10mbit": {"speedup": {"local": 1.0, "mcpipe": 0.5, "pipedream": 0.6}},
    }
    res = {
        "regime": {"chosen": "b", "settings": settings},
        # GreedyUpdates predicted fastest: 8 s against Local's 10 and 12 s; never on seed 3 (a
        # bound: Local's 10 s over its whole 20 s)
        "accuracy": [row("local", s, t) for s, t in ((1, 10.0), (2, 12.0), (3, 10.0))]
        + [row("greedy", s, t) for s, t in ((1, 8.0), (2, 8.0), (3, None))]
        + [row("mcpipe", s, 5.0) for s in (1, 2, 3)],
        # on the slow link PipeDream predicted the faster pipeline (still behind Local)
        "extra": [row("pipedream", s, 40.0, setting="slow", run=f"x{s}") for s in (1, 2)],
    }
    p = SimpleNamespace(topologies=(2,), budget_s=20.0,
                        extra=(("slow", None, 2, "10mbit", ("pipedream",)),))  # fmt: skip
    got = {c.id: c for c in regime_claims(res, p)}
    fast = got["R-MP-RT b-n2-1gbit"]
    assert fast.details["arm"] == "greedy" and fast.paper_value == "> 1"
    assert fast.details["per_seed"] == pytest.approx({1: 1.25, 2: 1.5, 3: 0.5})
    assert fast.ours is not None and fast.ours.median == pytest.approx(1.25)
    assert fast.direction_agrees is True and "a bound" in fast.deviations
    slow = got["R-MP-RT b-n2-10mbit"]
    assert slow.details["arm"] == "pipedream" and slow.paper_value == "<= 1"
    assert slow.details["per_seed"] == pytest.approx({1: 0.25, 2: 0.3})
    assert slow.direction_agrees is True and "a bound" not in slow.deviations


def test_pilot_stages_as_measured() -> None:
    from reproductions.mcpipe_calibration import measures_of

    def stage(index: int, updates: object, **cpu: object) -> dict:
        return {"index": index, "updates": updates, "compute_cpu_s": 2.0, "replay_cpu_s": 0.5,
                "process_cpu_s": 2.5, **cpu}  # fmt: skip

    summary = {"technique_report": {"stages": [stage(1, 100), stage(0, 100, replay_cpu_s=None)]}}
    got = measures_of(summary, 0.5)
    assert got is not None and [m.replay_cpu_s for m in got] == [0.0, 0.5]  # in stage order
    assert got[1].compute_s == pytest.approx(0.03)  # (2.0 - 0.5) / 100 / 0.5
    assert got[0].outside_s == pytest.approx(0.01)
    assert measures_of({"technique_report": {"stages": [stage(0, None)]}}, 0.5) is None
    lacking = {"technique_report": {"stages": [stage(0, 10, process_cpu_s=None)]}}
    assert measures_of(lacking, 1.0) is None
    assert measures_of({}, 1.0) is None


def _mem(config: str, technique: str, index: int, m: int, resident: int, **kw: object) -> dict:
    base = {"config": config, "technique": technique, "index": index, "m": m,
            "resident": resident, "formula": resident, "model": "mlp-2048", "stages": 3,
            "extra": 1, "partition": "spec", "units": ["1"], "params": 1000,
            "model_sha256": "a", "paper_bound": 1200, "transient": resident,
            "rss_delta": resident}  # fmt: skip
    return {**base, **kw}


def test_memory_claims_and_where_mcpipe_does_not_save() -> None:
    memory = [
        _mem("c", "pipedream", 0, 4, 16000), _mem("c", "mcpipe", 0, 4, 5000),
        _mem("c", "pipedream", 2, 2, 8000), _mem("c", "mcpipe", 2, 2, 10000),
        _mem("c", "pipedream", 3, 1, 4000), _mem("c", "mcpipe", 3, 1, 4000, formula=3000),
    ]  # fmt: skip
    goal = mcpipe_claims._memory_goal(memory)
    assert goal.ours is not None and goal.ours.median == pytest.approx(3.2)
    assert goal.direction_agrees is True
    lost = mcpipe_claims.no_saving(memory)
    assert [(r["stage"], "pairs outweigh" in r["why"]) for r in lost] == [(2, True), (3, False)]
    bound = mcpipe_claims._general_bound(memory)
    assert "measuring error" in bound.deviations  # 4000 measured over a 3000-byte formula


def test_fits_and_link_claims() -> None:
    fits = {"limit_bytes": 900 * 2**20, "peaks": {"pipedream": 2**30, "mcpipe": 700 * 2**20},
            "pipedream": {"status": "failed", "oom_kills": 1, "error": "lost stage 0"},
            "mcpipe": {"status": "completed", "model_sha256": "s"},
            "unlimited_mcpipe_sha256": "s"}  # fmt: skip
    claim = mcpipe_claims._fits(fits)
    assert claim.direction_agrees is True and claim.ours is not None and claim.ours.median == 900
    assert "900 MiB" in claim.deviations and "equal to the unlimited run's" in claim.deviations
    # 1 s busy at 10 Mbit/s, the 32 KiB bucket full at the start, refilled 1 ms (10 kbit) in a
    # short gap and wholly in a long one: 10,000,000 + 262,144 + 10,000 + 262,144 bits at most
    inbox = {"busy_s": 1.0, "idle_gaps_s": [0.001, 5.0], "bytes_stamped": 1_200_000}
    assert mcpipe_claims.link_efficiency(inbox, 1e7, 32768) == pytest.approx(9.6e6 / 10_534_288)
    over = {"busy_s": 1.0, "idle_gaps_s": [0.001, 5.0], "bytes_stamped": 1_400_000}
    link = mcpipe_claims._link({"rate_bps": 1e7, "burst_bytes": 32768,
                                "inboxes": {"activations": inbox, "errors": over}})  # fmt: skip
    assert link.ours is not None and link.ours.min == pytest.approx(0.911, abs=1e-3)
    assert link.direction_agrees is True and "errors, timed by" in link.deviations
    too_much = mcpipe_claims._link({"rate_bps": 1e7, "burst_bytes": 32768,
                                    "inboxes": {"activations": over}})  # fmt: skip
    assert "measuring error" in too_much.deviations  # 1.06 of what tbf lets through


def test_recipes_parse_and_hosts_files_place_the_evaluator_away_from_stage_0() -> None:
    from edgetrain.recipe import parse_recipe
    from edgetrain.runtime.side import launcher_side

    w = Workload("digits", "mlp", MLP_WIDE)
    for spec in (
        RunSpec("pipedream", 3, 1, (1, 1, 2), budget_s=90.0, snapshot_every=125),
        RunSpec("dataparallel", 2, budget_s=90.0, snapshot_every=125),
        RunSpec("local", 1, budget_s=90.0, snapshot_every=125),
        RunSpec("mcpipe", 2, 2, (2, 2), evaluator=False, microbatches=22, epochs=1, memory=True),
        RunSpec("pipedream", 2, 2, (3, 1), evaluator=False, heartbeat_s=10.0),
    ):
        parsed = parse_recipe(loads(recipe(w, spec, "arm").format(seed=4)))
        launcher_side("pipeline", parsed.train.technique).check(parsed)
        assert parsed.run.seed == 4 and parsed.train.technique == spec.technique
        assert parsed.model.options == MLP_WIDE and parsed.train.momentum == 0
        assert parsed.run.heartbeat_s == (spec.heartbeat_s or 1.0)
    assert slots(RunSpec("pipedream", 3), 3) == [1, 1, 2]
    assert slots(RunSpec("local", 1), 2) == [1, 1]
    assert slots(RunSpec("mcpipe", 2, evaluator=False), 3) == [1, 1, 0]
    testbed = {"python": "/p", "hosts": [{"address": f"10.0.0.{k}", "name": f"laptop-{k}"}
                                          for k in (1, 2, 3)]}  # fmt: skip
    text = hosts_text(testbed, [1, 2, 0])
    hosts = loads(text)["hosts"]
    assert [(h["name"], h["workers"]) for h in hosts] == [("laptop-1", 1), ("laptop-2", 2)]


@needs_torchvision
def test_the_full_plan_cuts_vgg16_as_the_specification_does(tmp_path: Path) -> None:
    args = type("A", (), {"seeds": 3, "smoke": False, "quick": False})()
    p = mcpipe.plan_for(args, tmp_path)
    assert p.seeds == (1, 2, 3) and p.topologies == (2, 3) and p.link
    vgg = {c.key: c.split for c in p.memory if c.workload.model == "vgg16"}
    # §7.5: by parameters N = 2 cuts after fc1, N = 3 puts the convolutions, fc1 and fc2-fc3
    # apart; by time the fully connected layers land on the last stage
    assert vgg["vgg16-n2-params-e0"] == (14, 2) and vgg["vgg16-n3-params-e0"] == (13, 1, 2)
    assert vgg["vgg16-n2-time-e0"][-1] > 3 and vgg["vgg16-n3-time-e0"][-1] > 3
    assert p.fits is not None and p.fits.key == "vgg16-n2-params-e2" and p.fits.m0 == 4
    mlp = [c for c in p.memory if c.workload.model == "mlp"]
    assert {(c.split, c.extra) for c in mlp} == {((2, 2), 0), ((2, 2), 1), ((2, 1, 1), 0),
                                                 ((2, 1, 1), 1)}  # fmt: skip


def test_vgg_and_worker_count_claims_from_literal_rows() -> None:
    memory = []
    # by time: conv stage 0 (mcPipe worse), FC stage 1 (m = 1, equal); by parameters: fc1 on
    # stage 0 (1.9x), fc2-fc3 on stage 1
    shapes = {"time": ((1e6, 0.6), (1e8, 1.0)), "params": ((1e8, 1.9), (1e6, 1.0))}
    for partition, stages in shapes.items():
        key = f"vgg16-n2-{partition}-e0"
        for s, (params, ratio) in enumerate(stages):
            pd = int(1000 * ratio)
            memory += [
                _mem(key, "pipedream", s, 2 - s, pd, model="vgg16", partition=partition,
                     extra=0, params=params, stages=2),
                _mem(key, "mcpipe", s, 2 - s, 1000, model="vgg16", partition=partition,
                     extra=0, params=params, stages=2),
            ]  # fmt: skip
    by_time = mcpipe_claims._vgg(memory, "time", "M7", "-")
    assert by_time.ours is not None and by_time.ours.median == 1.0  # the FC stage, last
    by_params = mcpipe_claims._vgg(memory, "params", "M8", "m")
    assert by_params.ours is not None and by_params.ours.median == pytest.approx(1.9)
    assert by_params.direction_agrees is True
    lost = mcpipe_claims.no_saving(memory)
    assert ("vgg16-n2-time-e0", 0) in {(r["config"], r["stage"]) for r in lost}
    assert "early convolutions" in next(r["why"] for r in lost if r["stage"] == 0)
    rows = [_acc("mcpipe", 1, 2, 5.0, 40.0, 0.95), _acc("mcpipe", 1, 3, 4.0, 30.0, 0.96)]
    three = mcpipe_claims._workers(rows, (2, 3))
    assert three is not None and three.ours is not None and three.ours.median == 0.75
    assert three.direction_agrees is True and mcpipe_claims._workers(rows, (2,)) is None


def test_a_kept_regime_of_another_plan_is_refused(tmp_path: Path) -> None:
    from edgetrain.errors import EdgetrainError
    from reproductions import mcpipe_regime

    def plan(**kw: object) -> mcpipe.Plan:
        args = type("A", (), {"seeds": 3, "smoke": False, "quick": False} | kw)()
        return mcpipe.plan_for(args, tmp_path)

    smoke, quick = plan(smoke=True), plan(quick=True)
    out = tmp_path / "out"
    out.mkdir()
    keys = [key for key, *_ in mcpipe_regime.headline_settings(smoke)]
    assert keys and all(key.endswith("-1gbit") for key in keys)
    (out / "regime.json").write_text(json.dumps({"settings": dict.fromkeys(keys, {})}))
    mcpipe_regime.check_kept_regime(smoke, out)
    missing = [k for k, *_ in mcpipe_regime.headline_settings(quick) if k not in keys]
    assert missing
    with pytest.raises(EdgetrainError, match="not this plan's " + missing[0]):
        mcpipe_regime.check_kept_regime(quick, out)
