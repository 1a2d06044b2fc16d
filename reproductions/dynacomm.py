"""Reproduce DynaComm (Cai et al., IEEE JSAC 2022) on the emulated testbed: the four schedules
live, measured against the simulator's prediction and against the paper.

``scripts/reproduce-dynacomm [--quick] [--seeds N] [--out DIR] [--format json]``

What runs (shared/specs/ps.md §3.1), on ``recipes/testbeds/dynacomm-repro.toml`` (three trainers
on their own access links of one rate per batch, a parameter server on the LAN, 0.45 core each):

- R-DC1/R-DC2: sequential, lbl, ibatch (the paper's Alg. 1/2) and dynacomm, interleaved, for
  each model at 100 and 300 Mbit/s (mobilenet_v2 at 300 only), without and with an emulated
  10 ms round trip (``[ps] hold_ms``); the local batch per model and bandwidth comes from a
  pilot run (seed 0, reported, not reused) so that compute and communication are comparable.
- R-DC3: measured iteration time against the simulator's prediction from the same run's
  measured costs, on 0.45-core hosts and on ``dynacomm-repro-1`` (0.9 core).
- R-DC4: under a bandwidth trace (300 -> 20 -> 300 Mbit/s, phases sized from the pilot's
  costs), DynaComm re-planned at every barrier against its frozen plan, both starting from one
  plan file made before the first run (profiled on a trainer host, planned at 300 Mbit/s), and
  against layer-by-layer; at least 3 seeds, interleaved.
- R-DC5: the same seed gives the same ``model_sha256`` under every schedule.

Resumable: a run whose summary says it completed is kept (``OUT/runs/``). Figures are measured
here; the paper's are quoted beside them with the reasons ours differ.
"""

from __future__ import annotations

import argparse
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment import cli, recipes, report
from edgetrain.experiment.arms import Arm, interleave
from edgetrain.experiment.beds import Bed, BedSpec, access_at, bring_up, trace_toml, write_trace
from edgetrain.experiment.pilot import PILOT_SEED
from edgetrain.experiment.runner import Runner
from edgetrain.experiment.testbed import trace_running
from reproductions.dynacomm_claims import build_claims
from reproductions.dynacomm_measure import measure, same_weights
from reproductions.dynacomm_plan import (
    BATCHES,
    QUICK_HELP,
    SCHEDULES,
    SMOKE_HELP,
    TESTBED,
    TESTBED_1,
    Plan,
    Setting,
    data,
    epochs_for,
    plan_for,
    recipe,
)
from reproductions.dynacomm_text import sections, trace_text
from reproductions.dynacomm_trace import (
    arm_plan_keys,
    by_phase,
    data_iterations,
    phase_of,
    phases_for,
    trace_changes,
    trace_plan,
)

# the paper's plan, arms and claims, as its tests and readers use them
__all__ = [
    "SCHEDULES",
    "Plan",
    "Setting",
    "build_claims",
    "main",
    "plan_for",
    "recipe",
    "reproduce",
    "same_weights",
    "trace_text",
]


def pilot_batch(
    runner: Runner, s: Setting, root: Path | None, bed: Bed, local: bool
) -> tuple[int, dict[str, Any]]:
    """Seed 0 (reported, never reused): one sequential run at batch 64 measures C and M; the
    batch whose predicted C (compute grows with the batch) best balances M is chosen."""
    probe = replace(s, batch=64, iterations=16)
    text = recipe(probe, "sequential", data(local, root, probe.trainers, 64, 8))
    m = measure(runner.summary(Arm(f"pilot-{probe.key}", text), PILOT_SEED, bed))
    c, comm = m["compute_s"], m["communication_s"]
    if not c or not comm:
        return 64, m
    best = min(BATCHES, key=lambda b: abs(c * b / 64 - comm))
    return best, {**m, "batch_chosen": best}


def run_setting(
    runner: Runner, s: Setting, p: Plan, root: Path | None, bed: Bed
) -> dict[str, list[dict[str, Any]]]:
    """The four schedules at one setting, interleaved seed by seed."""
    text = data(p.local, root, s.trainers, s.batch, s.iterations)
    epochs = epochs_for(s, p.local)
    arms = [Arm(f"{t}-{s.key}", recipe(s, t, text, epochs), label=t) for t in SCHEDULES]
    got: dict[str, list[dict[str, Any]]] = {t: [] for t in SCHEDULES}
    for arm, seed in interleave(arms, p.seeds):
        run = runner.summary(arm, seed, bed)
        got[arm.arm].append({"seed": seed, "run": run["run"], **measure(run)})
    return got


def run_trace(
    runner: Runner, s: Setting, p: Plan, root: Path | None, bed: Bed, pilot: dict[str, Any]
) -> dict[str, Any]:
    """R-DC4: a bandwidth trace (rate -> 20 Mbit/s -> rate, phases sized from the pilot's
    costs) during three arms, interleaved over the seeds: DynaComm re-planned at every barrier
    and frozen, both starting from one plan file made before the first run, and lbl."""
    assert bed.tb is not None
    scale = s.batch / 64  # the pilot measured compute at batch 64
    compute = pilot.get("compute_s")
    ph = phases_for(
        s.bandwidth_mbit,
        compute * scale if isinstance(compute, (int, float)) else None,
        pilot.get("communication_s"),
    )
    trace = write_trace(
        runner.out / "testbeds" / f"trace-{s.key}.toml",
        trace_toml(trace_changes(ph, s.trainers)),
    )
    plan_path, plan = trace_plan(
        runner.out, s.key, s.model, s.batch, s.bandwidth_mbit, pilot.get("dt_s"), bed, runner.say
    )
    text = data(p.local, root, s.trainers, s.batch, data_iterations(recipes.MNIST_TEST_SPLIT))
    # At 20 Mbit/s one push of mobilenet_v2 (8.9 MB) holds a trainer's access link for 3.6 s,
    # and heartbeats share the shaper's tail-drop queue with it (a dropped heartbeat waits out
    # TCP's backoff): 2 s heartbeats (dead after 6 s) stopped the first full run, so the trace
    # arms beat every 5 s (15 s).
    hb = 5.0
    warm = arm_plan_keys(plan_path, s.bandwidth_mbit)
    texts = {
        "replanned": recipe(s, "dynacomm", text, ph.epochs, heartbeat_s=hb, ps_extra=warm),
        "frozen": recipe(s, "dynacomm", text, ph.epochs, "never", heartbeat_s=hb, ps_extra=warm),
        "lbl": recipe(s, "lbl", text, ph.epochs, heartbeat_s=hb),
    }
    # "warm": not the runs of the cold-start trace this replaces (a resumed OUT keeps runs)
    arms = [Arm(f"trace-{key}-warm-{s.key}", t, label=key) for key, t in texts.items()]
    seeds: dict[str, dict[str, Any]] = {}
    for arm, seed in interleave(arms, p.trace_seeds):
        got = seeds.setdefault(str(seed), {})
        try:
            with trace_running(bed.tb.name, trace):
                run = runner.summary(arm, seed, bed)
        except EdgetrainError as exc:
            # an arm the trace stops is a result, not the end of the reproduction
            runner.say(f"{arm.name}-s{seed}: did not complete under the trace")
            got[arm.arm] = {"run": f"{arm.name}-s{seed}", "failed": str(exc)}
            continue
        row = {"run": run["run"], "train_s": run["train_s"], **measure(run)}
        for r in row["per_epoch"]:
            r["phase"] = phase_of(r, ph)
        got[arm.arm] = row | {"phases": by_phase(row["per_epoch"], ph)}
    return {"phases": ph.as_dict(), "plan": plan, "seeds": seeds}


def reproduce(args: argparse.Namespace) -> dict[str, Any]:
    """Run the mode's plan into ``--out`` (what ran before is kept) and write the report."""
    p = plan_for(args)
    out, root = cli.out_dir(args, not p.local, resolve=False)
    runner = Runner(out, cli.say)
    results: dict[str, Any] = {"settings": {}, "pilot": {}, "prediction": {}, "testbeds": {}}
    runs: list[dict[str, Any]] = []

    def bed(name: str, spec: Path, bandwidth: int, label: str) -> AbstractContextManager[Bed]:
        """The testbed with its access links at ``bandwidth``; none for a local smoke."""
        at = BedSpec(name, spec=access_at(spec, f"{bandwidth}mbit"))
        about = f" at {bandwidth} Mbit/s"
        tables = results["testbeds"]
        return bring_up(at, out, p.local, cli.say, tables, label, f"{name}-{bandwidth}", about)

    for bandwidth in p.bandwidths:
        with bed("dynacomm-repro", TESTBED, bandwidth, f"{bandwidth}mbit") as b:
            for model in p.models:
                if (model, bandwidth) in p.skip:
                    continue
                base = Setting(
                    model,
                    bandwidth,
                    0.0,
                    32 if p.local else 64,
                    3 if not p.local else 2,
                    30 if not p.local else 10,
                )
                if not p.local:
                    batch, pilot = pilot_batch(runner, base, root, b, p.local)
                    results["pilot"][f"{model}-{bandwidth}mbit"] = pilot
                    base = replace(base, batch=batch)
                for hold in p.holds:
                    s = replace(base, hold_ms=hold)
                    got = run_setting(runner, s, p, root, b)
                    results["settings"][s.key] = {"setting": s.__dict__, "results": got}
                    runs += [r for rs in got.values() for r in rs]
                    if hold == 0:
                        pred = results["prediction"]
                        rows = [r for rs in got.values() for r in rs]
                        pred.setdefault("quota_045", []).extend(r["prediction_error"] for r in rows)
                        pred.setdefault("quota_045_with_waits", []).extend(
                            r["prediction_error_with_waits"] for r in rows
                        )
            if p.replan_trace and b.tb is not None and bandwidth == max(p.bandwidths):
                chosen = results["pilot"].get(f"{p.models[-1]}-{bandwidth}mbit", {})
                s = Setting(p.models[-1], bandwidth, batch=chosen.get("batch_chosen", 64))
                results["trace"] = run_trace(runner, s, p, root, b, chosen)
    if p.prediction_check:
        bandwidth = max(p.bandwidths)
        with bed("dynacomm-repro-1", TESTBED_1, bandwidth, "0.9 core") as b:
            model = p.models[1] if len(p.models) > 1 else p.models[0]
            batch = results["pilot"].get(f"{model}-{bandwidth}mbit", {}).get("batch_chosen", 64)
            s = Setting(model, bandwidth, 0.0, batch, trainers=1, core=0.9)
            got = run_setting(runner, s, p, root, b)
            results["prediction"]["quota_09"] = [
                r["prediction_error"] for rs in got.values() for r in rs
            ]
            results["prediction"]["quota_09_by_schedule"] = {
                t: [r["prediction_error"] for r in rs] for t, rs in got.items()
            }
            results["settings"][s.key] = {"setting": s.__dict__, "results": got}
    if p.accuracy_check:
        results["same_weights"] = same_weights(list(results["settings"].values())[:1])
    claims = build_claims(results, p)
    return report.write(
        out, "dynacomm", "DynaComm", claims, runs, sections(results, p), {"results": results}
    )


main = cli.entry("dynacomm", __doc__, reproduce, 5, QUICK_HELP, SMOKE_HELP)


if __name__ == "__main__":
    raise SystemExit(main())
