"""Reproduce Mercury (Zeng, Yan, Zhang, SenSys 2021) on the emulated testbed: its speed-up over
standard distributed SGD at several bandwidths, the ablations of each mechanism, the premises
and the speed-up model against measurement.

``scripts/reproduce-mercury [--quick] [--seeds N] [--out DIR] [--format json]``

What runs (shared/specs/ps.md §3.2), on ``recipes/testbeds/mercury-4u.toml`` (four devices at
0.45 core, each on its own access link, all at one rate per batch), LeNet-5 on the MNIST test
set (8,000 train / 2,000 test, 2,000 a device), Adam, local batch 32, evaluation every 20
iterations (outside the training clock):

- Regime first (:mod:`reproductions.mercury_regime`): before any run, every model is profiled
  on one device and the cost model predicts both arms' iteration in every R-M1 cell, written
  once to ``OUT/regime.json`` (time, commit); the report puts each measured iteration beside it.
- Pilots (seed 0, reported, never reused), per model: the uniform baseline for the whole budget
  at each candidate learning rate (the best fixes the learning rate of every arm), then
  Mercury at that rate; both curves fix the targets (98.5% for cnn2, 98% for LeNet-5, where
  every pilot's plateau shows it reachable; else under the lowest plateau), before any
  measured run.
- The headline: cnn2 at 10 and 50 Mbit/s, ``multips-sgd`` against ``mercury``, every seed
  (default 5); R-M1g is the goal (at least 1.3x at 10 Mbit/s, never slower).
- R-M1: ``multips-sgd`` against ``mercury`` at 100, 10, 50 and 200 Mbit/s (LeNet-5, the first
  3 seeds), interleaved seed by seed; R-M8 (the speed-up model, Eq. 5) and the BACC share of
  R-M4 come from these runs.
- At 100 Mbit/s: R-M2 (group-wise against All-IS), R-M3 (no / agnostic / random-control /
  aware resharding on a Dirichlet 0.5 start, fixed budget), R-M4 (BACC against the sequential
  pipeline), R-M5 (adaptive against bandwidth-agnostic BACC under the ±10% trace
  ``recipes/testbeds/traces/mercury-4u-variation.toml``), R-M6 (federated, Dirichlet 10 / 1 /
  0.5) and R-M7 (the premises, probed during uniform training).

``--quick``: R-M1 at 100 Mbit/s on digits, one seed (< 10 min); ``--quick --bandwidths
200,10``: R-M1 at those rates instead (the pilot at the first). ``--smoke`` (the test suite):
the same on local processes with a tiny budget. ``--testbed local``: local processes, no link
limits (one bandwidth, R-M5 not run). Resumable: a run whose summary says it completed is kept.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.emulate.trace import load_trace
from edgetrain.experiment import cli, report
from edgetrain.experiment.arms import Arm
from edgetrain.experiment.beds import Bed, BedSpec, access_at, bring_up, trace_toml, write_trace
from edgetrain.experiment.claims import Row
from edgetrain.experiment.compare import seed_by_seed
from edgetrain.experiment.runner import Runner, Summary
from edgetrain.experiment.testbed import trace_running
from reproductions import mercury_claims as claims
from reproductions.mercury_plan import (
    BANDWIDTHS_HELP,
    PROBES,
    QUICK_HELP,
    R_M3,
    SMOKE_HELP,
    SPEC_TARGETS,
    TARGET_CAPS,
    TESTBED_HELP,
    Plan,
    data_table,
    plan_dict,
    plan_for,
    targets_of,
)
from reproductions.mercury_plan import recipe as make_recipe
from reproductions.mercury_regime import (
    against_measured,
    check_kept_predictions,
    merged,
    phase_calibrated,
    phase_regime,
)
from reproductions.mercury_text import CALIBRATION, sections

# the paper's plan, arms and claims, as its tests and readers use them
__all__ = ["TRACE", "main", "measure", "reproduce", "trace_text"]
REPO = Path(__file__).resolve().parents[1]
TESTBED = REPO / "recipes" / "testbeds" / "mercury-4u.toml"
TRACE = REPO / "recipes" / "testbeds" / "traces" / "mercury-4u-variation.toml"
NOMINAL_MBIT = 100  # the rate of the testbed file and the trace
RUN_TIMEOUT_S = 7200.0


def measure(
    summary: dict[str, Any], arm: str, seed: int, targets: dict[str, float], every: int
) -> dict[str, Any]:
    """One run's figures: training time and iterations to each target (``edgetrain
    compare``'s definitions: evaluation excluded), final accuracy, the speed-up model's terms
    per iteration, resharding bytes, the premises probed."""
    from edgetrain.report.compare import run_row

    own = summary.get("technique_report") or {}
    terms = own.get("per_iteration") or {}
    hashes = own.get("weights_hashes") or {}
    row: dict[str, Any] = {
        "arm": arm,
        "seed": seed,
        "run": summary.get("run"),
        "status": summary.get("status"),
        "train_s": summary.get("train_s"),
        "final_accuracy": run_row(summary, None)["final_accuracy"],
        "iterations": summary.get("iterations"),
        "bytes_sent": summary.get("bytes_sent"),
        "reshard_bytes": own.get("reshard_bytes"),
        "reshard_rounds": own.get("reshard_rounds"),
        "cohort_mean": own.get("cohort_mean"),
        "beta": own.get("beta"),
        "hashes_agree": len(set(hashes.values())) == 1 if hashes else None,
        "premises": own.get("premises") or [],
        **{k: terms.get(k) for k in ("t_cp_s", "t_cm_s", "t_is_s", "t_it_s", "cpu_s", "cpu_use")},
    }
    for name, target in targets.items():
        got = run_row(summary, target)
        epoch = got["target_epoch"]
        row[f"time_to_{name}"] = got["time_to_target_s"]
        row[f"iterations_to_{name}"] = epoch * every if epoch else None
    return row


def trace_text(bandwidth: int) -> str:
    """The ±10% variation trace, its rates scaled from 100 Mbit/s to ``bandwidth``."""
    trace = load_trace(TRACE)
    changes = []
    for c in trace.changes:
        assert c.link is not None and c.rate is not None
        rate = f"{round(c.rate * bandwidth / NOMINAL_MBIT / 1000)}kbit"
        changes.append({"at": c.at, "link": c.link, "rate": rate})
    return trace_toml(changes, loop=trace.loop)


@dataclass
class Batches:
    """Mercury's arms, run by ``runner`` at the learning rate and targets the pilot fixed."""

    p: Plan
    runner: Runner
    root: str | None
    lr: float = 0.001
    targets: dict[str, float] = field(default_factory=dict)

    def arm(
        self,
        name: str,
        tag: str,
        alpha: float | None = None,
        stop: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> Arm:
        data = data_table(self.p, self.root, alpha)
        target = self.targets.get("primary") if stop else None
        text = make_recipe(self.p, name, data, self.lr, target, extra)
        return Arm(f"{name}-{tag}", text, label=name)

    def batch(
        self,
        group: str,
        names: Sequence[str],
        tag: str,
        bed: Bed,
        alpha: float | None = None,
        stop: bool = True,
        trace: Path | None = None,
        seeds: Sequence[int] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> list[Row]:
        """``names`` at every seed, interleaved (A s1, B s1, A s2, ...)."""

        def row(arm: Arm, seed: int, summary: Summary) -> Row:
            got = measure(summary, arm.arm, seed, self.targets, self.p.every)
            return got | {"group": group, "name": arm.name}

        def around(arm: Arm, seed: int) -> AbstractContextManager[Any]:
            if trace is not None and bed.tb is not None:
                return trace_running(bed.tb.name, trace)
            return nullcontext()

        arms = [self.arm(n, tag, alpha, stop, extra) for n in names]
        return self.runner.batch(arms, seeds or self.p.seeds, bed, row, around)


def _pilot(run: Batches, bed: Bed, prefix: str = "") -> dict[str, Any]:
    """Seed 0 of the uniform baseline for the whole budget at each candidate learning rate (the
    best fixes the learning rate), then of every other pilot arm at that rate: the pilots'
    curves fix the targets (:func:`~reproductions.mercury_plan.targets_of`). Reported, never
    reused."""
    p = run.p
    tried = []
    for lr in p.lrs:
        run.lr = lr
        arm = run.arm("uniform", f"{prefix}pilot-lr{lr:g}", stop=False)
        tried.append(_pilot_run(run, arm, bed, lr))
    best = max(tried, key=lambda t: t["final_accuracy"] or 0.0)
    run.lr = best["lr"]
    pilots = {"uniform": best}
    for name in p.pilot_arms:
        if name != "uniform":
            arm = run.arm(name, f"{prefix}pilot-lr{run.lr:g}", stop=False)
            pilots[name] = _pilot_run(run, arm, bed, run.lr)
    margin = 0.015 if p.dataset == "digits" else 0.005
    cap = TARGET_CAPS.get(p.model, SPEC_TARGETS[0])
    rule = targets_of({k: v["curve"] for k, v in pilots.items()}, p.budget, cap, margin)
    run.targets = {"primary": rule["primary"], "secondary": rule["secondary"]}
    return {
        "seed": p.pilot_seed,
        "model": p.model,
        "lr": run.lr,
        "targets": run.targets,
        "rule": rule,
        "tried": tried,
        "pilots": {k: {x: y for x, y in v.items() if x != "curve"} for k, v in pilots.items()},
    }


def _pilot_run(run: Batches, arm: Arm, bed: Bed, lr: float) -> dict[str, Any]:
    summary = run.runner.summary(arm, run.p.pilot_seed, bed)
    row = measure(summary, arm.arm, run.p.pilot_seed, {}, run.p.every)
    return {
        "lr": lr,
        "arm": arm.arm,
        "run": row["run"],
        "final_accuracy": row["final_accuracy"],
        "train_s": row["train_s"],
        "curve": _points(summary, run.p.every),
        # the terms a calibrated cost model reads (Eq. 5 with the measured T_cp, T_cm)
        **{k: row.get(k) for k in ("t_cp_s", "t_cm_s", "t_it_s", "cpu_use")},
    }


def _points(summary: Summary, every: int) -> list[list[float]]:
    """The curve as [iterations, accuracy] pairs (short enough for the report)."""
    return [
        [int(pt["epoch"]) * every, round(float(pt["test_accuracy"]), 4)]
        for pt in summary.get("curve", [])
        if isinstance(pt.get("test_accuracy"), (int, float))
    ]


def _calibrate(
    res: dict[str, Any], p: Plan, model: str, b: Bed, out: Path, where: str | None, bw: int,
    key: str = "pilot",
) -> None:  # fmt: skip
    """After ``model``'s pilot, before its measured runs: its cells predicted again with the
    uniform pilot's measured terms (:func:`~reproductions.mercury_regime.phase_calibrated`)."""
    pilot = ((res.get(key) or {}).get("pilots") or {}).get("uniform") or {}
    got = phase_calibrated(p, model, b, out, where, pilot, bw, cli.say)
    if got is not None:
        res.setdefault("regime_calibrated", {})[model] = got


def _compare(rows: Sequence[Row], target: float | None) -> dict[str, Any]:
    """``edgetrain compare`` of each seed's baseline and Mercury run (baseline first), without
    the curves."""
    out = {}
    for seed, got in seed_by_seed(rows, target, ("uniform", "mercury")).items():
        out[seed] = {k: v for k, v in got.items() if k != "runs"} | {
            "runs": [{k: v for k, v in r.items() if k != "curve"} for r in got["runs"]]
        }
    return out


def reproduce(args: argparse.Namespace) -> dict[str, Any]:
    """Run the mode's plan into ``--out`` (what ran before is kept) and write the report: the
    cost model's prediction first (``OUT/regime.json``), then the pilots, then the cells."""
    p = plan_for(args)
    out, root = cli.out_dir(args, p.dataset == "mnist")
    check_kept_predictions(p, out)
    runner = Runner(out, cli.say, RUN_TIMEOUT_S)
    where = str(root) if root else None
    run = Batches(p, runner, where)
    res: dict[str, Any] = {"r_m1": {}, "testbeds": {}, "compare": {}, "targets_by_model": {}}

    def bed(bw: int, label: str) -> AbstractContextManager[Bed]:
        spec = BedSpec("mercury-4u", spec=access_at(TESTBED, f"{bw}mbit"))
        about = f" at {bw} Mbit/s"
        tables = res["testbeds"]
        return bring_up(spec, out, p.local, cli.say, tables, label, f"mercury-4u-{bw}", about)

    for bw in p.bandwidths:
        with bed(bw, f"{bw} Mbit/s") as b:
            if "regime" not in res:  # before any measured run, the pilots included
                res["regime"] = phase_regime(p, b, out, where, cli.say)
            if bw == p.home:
                res["pilot"] = _pilot(run, b)
                res["targets_by_model"][p.model] = run.targets
                _calibrate(res, p, p.model, b, out, where, bw)
            tag = f"{bw}mbit" if not p.local else "local"
            rows = run.batch(f"R-M1 {bw}", ("uniform", "mercury"), tag, b)
            res["r_m1"][str(bw)] = rows
            res["compare"][str(bw)] = _compare(rows, run.targets.get("primary"))
            if bw == p.home:
                _home_experiments(run, res, b, tag)
    if p.headline_model is not None:
        head = Batches(p.for_model(p.headline_model), runner, where)
        name = p.headline_model
        # the pilots at the fastest of the headline's rates (accuracy per iteration does not
        # depend on the rate; time does)
        for bw in sorted(p.headline_bandwidths, reverse=True):
            with bed(bw, f"{bw} Mbit/s ({name})") as b:
                if "headline_pilot" not in res:
                    res["headline_pilot"] = _pilot(head, b, f"{name}-")
                    res["targets_by_model"][name] = head.targets
                    _calibrate(res, p, name, b, out, where, bw, "headline_pilot")
                tag = f"{name}-{bw}mbit" if not p.local else f"{name}-local-{bw}"
                rows = head.batch(f"R-M1 {name} {bw}", ("uniform", "mercury"), tag, b)
                res["r_m1"][f"{name}-{bw}"] = rows
                res["compare"][f"{name}-{bw}"] = _compare(rows, head.targets.get("primary"))
    res["targets"] = run.targets
    res["lr"] = run.lr
    res["predicted_against_measured"] = against_measured(res.get("regime") or {}, res["r_m1"])
    res["calibrated_against_measured"] = against_measured(
        merged(res.get("regime_calibrated") or {}), res["r_m1"]
    )
    found = claims.build(res, p)
    return report.write(
        out,
        "mercury",
        "Mercury",
        found,
        runner.rows,
        sections(res, p),
        {"results": res, "plan": plan_dict(p)},
        preamble=CALIBRATION,
    )


def _home_experiments(run: Batches, res: dict[str, Any], bed: Bed, tag: str) -> None:
    """R-M2 .. R-M7 at the first bandwidth, each where the plan asks for it."""
    p = run.p
    if "R-M2" in p.experiments:
        res["r_m2"] = run.batch("R-M2", ("groupwise", "all-is"), tag, bed)
    if "R-M3" in p.experiments:
        res["r_m3"] = run.batch("R-M3", R_M3, f"{tag}-dir0.5", bed, alpha=0.5, stop=False)
    if "R-M4" in p.experiments:
        res["r_m4"] = run.batch("R-M4", ("sequential",), tag, bed)
    if "R-M5" in p.experiments and bed.tb is not None:
        path = run.runner.out / "testbeds" / f"mercury-4u-variation-{p.home}.toml"
        trace = write_trace(path, trace_text(p.home))
        res["r_m5"] = run.batch(
            "R-M5", ("mercury", "bw-agnostic"), f"{tag}-trace", bed, trace=trace
        )
    if "R-M6" in p.experiments:
        res["r_m6"] = {
            f"{a:g}": run.batch(
                f"R-M6 {a:g}", ("fed-uniform", "fed-mercury"), f"{tag}-dir{a:g}", bed, alpha=a
            )
            for a in p.alphas
        }
    if "R-M7" in p.experiments:
        probes = [i for i in PROBES if i + 10 < p.budget]
        extra = {"premise_probe": probes}
        res["r_m7"] = run.batch(
            "R-M7", ("premises",), tag, bed, stop=False, seeds=p.seeds[:1], extra=extra
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``scripts/reproduce-mercury``: the shared flags and ``--bandwidths`` (with ``--quick``)."""
    ap = cli.parser("mercury", __doc__ or "", QUICK_HELP, SMOKE_HELP, 5, TESTBED_HELP)
    ap.add_argument("--bandwidths", default=None, metavar="MBIT[,MBIT...]", help=BANDWIDTHS_HELP)
    return cli.run(ap, argv, reproduce)


if __name__ == "__main__":
    raise SystemExit(main())
