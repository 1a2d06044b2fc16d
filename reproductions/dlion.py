"""Reproduce DLion (Hong & Chandra, HotCloud'19) on the emulated testbed: capacity-aware batching,
DLion against Gaia and Ako under compute and network heterogeneity, the LR/BS combinations,
the batch threshold, weight exchange, and selective propagation as a marked extension.

``scripts/reproduce-dlion [--quick] [--seeds N] [--out DIR] [--format json]``

What runs (shared/specs/gossip.md D.2), cnn2 on the MNIST test set (8,000 train / 2,000 test,
2,000 a worker), SGD momentum 0.9, b0 = 32, the same seeds, data and learning rate in every arm:

- A pilot (seed 0, reported, never reused as a measured seed) on ``dlion-compute-4`` first picks
  eta from {0.01, 0.02, 0.05} for the uniform baseline (Ako), then fixes the targets: T_high =
  the lower final accuracy of DLion and DLion without batching - 1 point, T_low = the lowest of
  DLion, Gaia and Ako - 1 point; pilots on ``dlion-network-4`` and the 4-site testbed fix the
  time budgets (0.6 x the pilot DLion's training time: still improving there).
- R-DL-5 (first: it sets T_bs = min(10% of N, the 1-epoch knee) for every later DLion run):
  uniform batches of total 64 ... 2048, 10 epochs, accuracy after 1 and after 10 epochs.
- R-DL-1 (5 seeds at least): DLion against DLion without batching, time to T_high, with each
  worker's idle fraction; a cut above the ideal bound (1 - k C_min / sum C = 33% at 3:1) is
  flagged as a measuring error. R-DL-1i: the same runs' cut in time per iteration. R-DL-1w:
  DLion with sample-weighted gradients (gossip.md A-35) as a third arm, against the same
  baseline (ours: Eq. 5 weighs a worker's mean gradient by 1/k whatever its batch).
- R-DL-2: DLion, Gaia (every worker its own site) and Ako (p from the LAN) to T_low, with DLion
  without weight exchange and without adaptive LR/BS as attribution arms.
- R-DL-4: Table 1's six LR/BS combinations, 10 epochs: final accuracy and training time.
- R-DL-3 on ``dlion-network-4``: DLion, Gaia (a parameter server per site) and Ako (p from the
  WAN) at the fixed budget, LAN and WAN bytes; DLion with full gradient exchange for the WAN
  bytes per iteration of partial against dense exchange.
- R-DL-6 (network testbed): WE none/periodic/early/late x full/partial GE, time to T_low.
- R-DL-7 (network testbed): partial GE with periodic WE: none, full to all, partial, best to
  worst synchronous and asynchronous, accuracy at the budget.
- R-DL-8, an extension (the paper never evaluated it): four single-worker sites (CPU
  0.7/0.5/0.4/0.3, 100 Mbit/s WAN between all), all-to-all against selective propagation.

Every arm is interleaved seed by seed (A, B, A, B) on one testbed brought up and verified
(``emulate up --verify``, its table in the report) before its batch. ``--quick``: R-DL-1 alone
on digits (LeNet-5, 30 epochs), one seed. ``--smoke`` (the test suite): R-DL-1's two arms for
two epochs on digits, local processes. ``--testbed local`` runs on local processes with
slowdowns in the testbeds' ratios (no link limits; sites from the recipe). Resumable: a
completed run is kept.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from edgetrain.experiment import cli, recipes, report
from edgetrain.experiment.beds import Bed, bring_up
from edgetrain.experiment.claims import arm_values, median
from edgetrain.experiment.curves import accuracy_at, time_to
from edgetrain.experiment.runner import Runner
from reproductions.dlion_claims import (
    build_claims,
    claim_r1,
    claims_r1,
    claims_r2,
    claims_r3,
    ideal_cut,
)
from reproductions.dlion_plan import (
    BEDS,
    LRS,
    NETWORK_TAG,
    QUICK_HELP,
    R1_ARMS,
    R2_ARMS,
    R3_ARMS,
    R6_ARMS,
    R7_ARMS,
    SITES_SPEC,
    SMOKE_HELP,
    TABLE1,
    TESTBED_HELP,
    TOTALS,
    Plan,
    knee,
    pick_lr,
    plan_for,
    recipe,
    same_bed,
    targets_from,
)
from reproductions.dlion_runs import Batches, measure
from reproductions.dlion_text import sections

# the paper's plan, arms and claims, as its tests and readers use them
__all__ = [
    "BEDS",
    "NETWORK_TAG",
    "R1_ARMS",
    "R2_ARMS",
    "R3_ARMS",
    "R6_ARMS",
    "R7_ARMS",
    "SITES_SPEC",
    "TABLE1",
    "Bed",
    "Plan",
    "accuracy_at",
    "build_claims",
    "claim_r1",
    "claims_r1",
    "claims_r2",
    "claims_r3",
    "ideal_cut",
    "knee",
    "main",
    "measure",
    "pick_lr",
    "plan_for",
    "recipe",
    "reproduce",
    "same_bed",
    "sections",
    "targets_from",
    "time_to",
]
N_TRAIN = {"mnist": 8000, "digits": 1437}


def reproduce(args: argparse.Namespace) -> dict[str, Any]:
    """Run the mode's plan into ``--out`` (what ran before is kept) and write the report."""
    p = plan_for(args)
    out, root = cli.out_dir(args, p.dataset == "mnist")
    runner = Runner(out, cli.say)
    res: dict[str, Any] = {"pilot": {"seed": p.pilot_seed}, "testbeds": {}, "budgets": {}}
    runs = Batches(p, runner, recipes.data(p.dataset, root), pilot=res["pilot"])
    claims = set(p.claims)

    def bed(key: str) -> AbstractContextManager[Bed]:
        return bring_up(BEDS[key], out, p.local, cli.say, res["testbeds"])

    with bed("compute") as b:
        _compute(runs, b, res, claims)
    if claims & {"R-DL-3", "R-DL-6", "R-DL-7"}:
        with bed("network") as b:
            budget = _budget(runs, b, res, "network")
            if "R-DL-3" in claims:
                res["r_dl_3"] = runs.batch(R3_ARMS, b, "R-DL-3", p.seeds, budget, NETWORK_TAG)
            if "R-DL-6" in claims:
                res["r_dl_6"] = runs.batch(R6_ARMS, b, "R-DL-6", p.side_seeds)
            if "R-DL-7" in claims:
                res["r_dl_7"] = runs.batch(R7_ARMS, b, "R-DL-7", p.side_seeds, budget)
    if "R-DL-8" in claims:
        with bed("sites") as b:
            budget = _budget(runs, b, res, "sites", "sel-off")
            res["r_dl_8"] = runs.batch(("sel-off", "sel-on"), b, "R-DL-8", p.side_seeds, budget)
    found = build_claims(res, p)
    return report.write(
        out, "dlion", "DLion", found, runner.rows, sections(res, p), {"results": res}
    )


def _compute(runs: Batches, bed: Bed, res: dict[str, Any], claims: set[str]) -> None:
    """On dlion-compute-4: the learning rate (unless fixed), R-DL-5 (which fixes T_bs), the
    targets from the pilot, then R-DL-1, R-DL-2 and R-DL-4."""
    p = runs.p
    if p.lr is None:
        finals = {lr: _lr_pilot(runs, bed, lr) for lr in LRS}
        runs.lr = pick_lr(finals)
        res["pilot"]["lr_finals"] = {str(k): v for k, v in finals.items()}
    else:
        runs.lr = p.lr
    res["lr"] = runs.lr
    n_train = N_TRAIN[p.dataset]
    if "R-DL-5" in claims:
        res["r_dl_5"] = _knee_sweep(runs, bed, p.side_seeds)
        k1 = res["r_dl_5"]["knee_1"]
        floor = len(BEDS["compute"].shares) * p.b0  # T_bs below the starting total: none
        runs.t_bs = max(floor, min(int(0.1 * n_train), k1)) if k1 else None
        res["r_dl_5"].update(n_train=n_train, t_bs=runs.t_bs)
    res["t_bs"] = runs.t_bs or int(0.1 * n_train)
    pilot_arms: tuple[str, ...] = ("dlion", "dlion-nobatch", "gaia", "ako")
    if claims == {"R-DL-1"}:
        pilot_arms = ("dlion", "dlion-nobatch")
    runs.targets = targets_from(runs.pilots(pilot_arms, bed, ""))
    res["targets"] = runs.targets
    if "R-DL-1" in claims:
        res["r_dl_1"] = runs.batch(p.r1_arms, bed, "R-DL-1", p.r1_seeds)
    if "R-DL-2" in claims:
        res["r_dl_2"] = runs.batch(R2_ARMS, bed, "R-DL-2", p.seeds)
    if "R-DL-4" in claims:
        res["r_dl_4"] = runs.batch([a for a, *_ in TABLE1], bed, "R-DL-4", p.side_seeds)


def _knee_sweep(runs: Batches, bed: Bed, seeds: Sequence[int]) -> dict[str, Any]:
    """R-DL-5: uniform batches, one total at a time, 10 epochs (1-epoch accuracy from the
    same runs' first epoch)."""
    rows: list[dict[str, Any]] = []
    for total in TOTALS:
        b0 = max(1, total // len(bed.spec.shares))
        rows += runs.batch([f"knee-{total}"], bed, "R-DL-5", seeds, b0=b0, epochs=10)
    acc_1 = {t: median(arm_values(rows, f"knee-{t}", "first_epoch_accuracy")) for t in TOTALS}
    acc_10 = {t: median(arm_values(rows, f"knee-{t}", "final_accuracy")) for t in TOTALS}
    known = [a for a in acc_10.values() if a is not None]
    return {
        "acc_1": {str(t): a for t, a in acc_1.items()},
        "acc_10": {str(t): a for t, a in acc_10.items()},
        "knee_1": knee(acc_1),
        "knee_10": knee(acc_10),
        "drop_10": max(known) - min(known) if known else None,
    }


def _lr_pilot(runs: Batches, bed: Bed, lr: float) -> float | None:
    runs.lr = lr
    return runs.pilots(("ako",), bed, f"-lr{lr:g}")["ako"]


def _budget(runs: Batches, bed: Bed, res: dict[str, Any], key: str, arm: str = "dlion") -> float:
    """A fixed time budget for ``key``'s testbed: 0.6 x the pilot's training time there."""
    runs.pilots((arm,), bed, f"-{key}")
    pilot = res["pilot"]["runs"][-1]
    budget = round(0.6 * float(pilot["train_s"] or 0.0), 2)
    res["budgets"][key] = budget
    return budget


main = cli.entry("dlion", __doc__, reproduce, 3, QUICK_HELP, SMOKE_HELP, TESTBED_HELP)


if __name__ == "__main__":
    raise SystemExit(main())
