"""Reproduce EdgeGossip (Han et al., IEEE TPDS 2021) on the emulated testbed: its speed-up over
epoch-synchronous GoSGD, the arms that isolate each mechanism, and its overheads and predictor.

``scripts/reproduce-edgegossip [--quick] [--seeds N] [--out DIR] [--format json]``

What runs (shared/specs/gossip.md D.1), on ``recipes/testbeds/edgegossip-4.toml`` (4:3:2:1 CPU
shares, one LAN), LeNet-5 on the MNIST test set (8,000 train / 2,000 test, 2,000 a worker):

- R-EG-5 first (its histories feed the predictor of every later run): ``edgetrain profile
  --contention`` inside each emulated host at 13 load levels, the held-out error per host.
- Pilots at a seed of their own (0, reported, never reused) of epoch-synchronous GoSGD and of
  EdgeGossip fix the target T_b on the rising curve: the lowest accuracy either had at half
  its training time, at least half a point under the lower of their plateaus (one lucky pilot
  cannot make it unreachable); T_a = 0.95 is the paper's LeNet-5 landmark.
- R-EG-1: GoSGD with epoch barriers (the paper's baseline), EdgeGossip (kept subsets
  shuffled, our default), GoSGD without barriers (the stronger baseline the paper never ran),
  and EdgeGossip with a random kept share, with exact per-sample losses (oracle), with its kept
  subsets in rank order (the printed Algorithm 2), and with the paper's literal global ranking
  in rank order; interleaved seed by seed. EdgeGossip's time to target includes its
  aggregation (before ``start``, so not in the run's clock: added here).
- R-EG-2: GoSGD and EdgeGossip at 1x, 3x and 5x imbalance (three testbeds).
- R-EG-3: aggregation ratios 5 and 20 beside R-EG-1's 10: overheads and accuracy.
- R-EG-4: generation time of the aggregates (three combinations and per-sample SVD against the
  whole-dataset one) at ratios 5/10/20 on 2,000 and 8,000 samples, against one LeNet-5 epoch.
- R-EG-8: GoSGD, EdgeGossip and EdgeGossip with a random kept share on non-IID shards
  (Dirichlet(0.5) per class, the issue's regime where the choice of kept samples can matter;
  the paper ran IID only): the aggregates against a random share at the same epochs.
- R-EG-6: scale and model cost, time per epoch (the map predicts them): GoSGD and EdgeGossip
  with the heavier cnn2 on edgegossip-4 (5 epochs), and with LeNet-5 on 2, 3 and 6 platforms
  whose fastest host is 4x the slowest (8 epochs; edgegossip-4 is the 4).
- R-EG-7: contention that changes mid-run, predictive against reactive against static balance:
  (i) a co-running load inside gpu-a's cgroup, (ii) gpu-a's CPU quota cut (invisible to /proc).

``--quick``: R-EG-1 alone on digits (LeNet-5), one seed, 20 epochs. ``--smoke`` (the test suite):
two arms, two epochs, local processes. ``--testbed local`` runs everything on local processes
with slowdowns in the testbed's ratios instead (R-EG-7 needs the emulated testbed). Every run
defers its evaluation (``[train] eval_deferred``: epoch-end snapshots scored after training),
so no quota'd host spends CPU on it while the clock runs. Resumable: a run whose summary says
it completed is kept (``OUT/runs/``), as are the profiles and the aggregation timings.
"""

from __future__ import annotations

import argparse
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from edgetrain.experiment import cli, recipes, report
from edgetrain.experiment.beds import Bed, bring_up
from edgetrain.experiment.compare import seed_by_seed
from edgetrain.experiment.pilot import curve_of, rising_target
from edgetrain.experiment.runner import Runner
from reproductions.edgegossip_claims import build_claims
from reproductions.edgegossip_contention import contention
from reproductions.edgegossip_plan import (
    IMBALANCE,
    NONIID,
    PILOT_ARMS,
    QUICK_HELP,
    R_EG_6,
    R_EG_8,
    SHARES,
    SMOKE_HELP,
    T_A,
    TESTBED_HELP,
    Plan,
    bed_spec,
    heavy_model,
    plan_for,
    recipe,
    scale_beds,
)
from reproductions.edgegossip_probes import aggregation_costs, profile_hosts
from reproductions.edgegossip_regime import check_kept_regime, phase_regime
from reproductions.edgegossip_runs import Batches, measure
from reproductions.edgegossip_text import sections

# the paper's plan, arms and claims, as its tests and readers use them
__all__ = [
    "SHARES",
    "Bed",
    "Plan",
    "bed_spec",
    "build_claims",
    "main",
    "plan_for",
    "recipe",
    "reproduce",
]


def reproduce(args: argparse.Namespace) -> dict[str, Any]:
    """Run the mode's plan into ``--out`` (what ran before is kept) and write the report."""
    p = plan_for(args)
    out, root = cli.out_dir(args, p.dataset == "mnist")
    check_kept_regime(p, out)
    runner = Runner(out, cli.say)
    res: dict[str, Any] = {"pilot": {}, "targets": {"a": T_A}, "testbeds": {}}
    history: str | None = None

    def bed(name: str, shares: tuple[float, ...]) -> AbstractContextManager[Bed]:
        about = f" ({', '.join(f'{s:g}' for s in shares)})"
        spec = bed_spec(name, shares)
        return bring_up(spec, out, p.local, cli.say, res["testbeds"], about=about)

    with bed("edgegossip-4", SHARES) as b:
        if p.predictor:
            res["r_eg_5"] = profile_hosts(p, b, out, cli.say)
            history = str(out / "profiles" / "{host}.history.jsonl")
        runs = Batches(p, runner, recipes.data(p.dataset, root), history)
        res["regime"] = phase_regime(p, b, out, runs.data, cli.say)  # before any run
        _pilot(runs, b, res)
        res["r_eg_1"] = runs.batch(p.arms, b, p.epochs, "R-EG-1")
        res["compare"] = seed_by_seed(res["r_eg_1"], runs.targets["b"])
        if p.ratios:
            res["r_eg_3"] = runs.batch(("eg-ratio5", "eg-ratio20"), b, p.epochs, "R-EG-3")
        if p.noniid:  # where the choice of kept samples can matter: the same arms, skewed shards
            skewed = replace(runs, data=runs.data | NONIID)
            res["r_eg_8"] = skewed.batch(R_EG_8, b, p.epochs, "R-EG-8", "-niid")
        if (heavy := heavy_model(p)) is not None:  # R-EG-6: the heavier model, per epoch
            # no history: R-EG-5 profiled the plan's model, so the predictor starts from the
            # first epoch's own per-sample time
            cnn = replace(runs, p=replace(p, model=heavy), history=None)
            res["r_eg_6"] = {
                "model": heavy,
                "runs": cnn.batch(R_EG_6, b, p.heavy_epochs, f"R-EG-6 {heavy}", f"-{heavy}"),
            }
        if p.contention and b.tb is not None:
            res["r_eg_7"] = contention(runs, b)
    if p.imbalance:
        # The R-EG-5 histories were profiled at edgegossip-4's shares: on the imbalance testbeds
        # each host's first t0 would come from another share. Without a history the predictor
        # starts from the first epoch's own per-sample time.
        imbalanced = replace(runs, history=None)
        res["r_eg_2"] = {}
        for k, shares in IMBALANCE.items():
            with bed(f"eg-imb{k}", shares) as b:
                res["r_eg_2"][str(k)] = imbalanced.batch(
                    ("gosgd-sync", "edgegossip"), b, p.side_epochs, f"R-EG-2 {k}x", f"-imb{k}"
                )
    if p.scale:  # R-EG-6: LeNet-5 at 2, 3 and 6 platforms, the fastest 4x the slowest
        scaled = replace(runs, history=None)
        res.setdefault("r_eg_6", {})["scale"] = {}
        for name, scale in scale_beds(p):
            n = len(scale)
            with bed(name, scale) as b:
                res["r_eg_6"]["scale"][str(n)] = scaled.batch(
                    R_EG_6, b, p.scale_epochs, f"R-EG-6 {n} platforms", f"-scale{n}"
                )
    if p.aggregation:
        res["r_eg_4"] = aggregation_costs(p, root, out, cli.say)
    found = build_claims(res, p)
    return report.write(
        out, "edgegossip", "EdgeGossip", found, runner.rows, sections(res, p), {"results": res}
    )


def _pilot(runs: Batches, bed: Bed, res: dict[str, Any]) -> None:
    """The pilots (epoch-synchronous GoSGD and EdgeGossip at the pilot seed) fix T_b on the
    rising curve: the lowest accuracy either had at half its training time, at least half a
    point under the lower of their plateaus. One lucky pilot cannot make it unreachable: a
    single GoSGD pilot's final accuracy less half a point (the rule before) was 0.975 where
    GoSGD's measured seed levelled off at 0.97 and EdgeGossip's at 0.966."""
    p = runs.p
    pilots = {
        arm: runs.runner.summary(runs.arm(arm, bed, p.epochs, "-pilot"), p.pilot_seed, bed)
        for arm in PILOT_ARMS
    }
    curves = {arm: curve_of(s) for arm, s in pilots.items()}
    target = rising_target(curves) if any(curves.values()) else T_A
    runs.targets = {"a": T_A, "b": round(target, 4)}
    res["targets"] = runs.targets
    res["pilot"] = {
        "seed": p.pilot_seed,
        "rule": "min(accuracy at half the training time, lowest plateau - 0.5 points) over "
        + " and ".join(PILOT_ARMS),
        "arms": {
            arm: {
                "run": s["run"],
                "final_accuracy": measure(s, arm, p.pilot_seed, {})["final_accuracy"],
                "curve": s.get("curve"),
            }
            for arm, s in pilots.items()
        },
    }


main = cli.entry("edgegossip", __doc__, reproduce, 5, QUICK_HELP, SMOKE_HELP, TESTBED_HELP)


if __name__ == "__main__":
    raise SystemExit(main())
