"""Reproduce DLion (Hong & Chandra, HotCloud'19) on the emulated testbed: capacity-aware batching,
DLion against Gaia and Ako under compute and network heterogeneity, the LR/BS combinations,
the batch threshold, weight exchange, and selective propagation as a marked extension.

``scripts/reproduce-dlion [--quick] [--seeds N] [--out DIR] [--format json]``

What runs (shared/specs/gossip.md D.2), on the MNIST test set (8,000 train / 2,000 test, 2,000
a worker), SGD momentum 0.9, the same seeds and data in every arm:

- Regime first (:mod:`reproductions.dlion_regime`): before any run, each candidate workload
  (LeNet-5 at b0 = 32, 64 and 128) is profiled on the fast host of ``dlion-compute-4``, and
  the cost model predicts DLion with and without capacity-aware batching, Gaia and Ako on
  ``dlion-compute-4`` at the emulator's 100 ms CPU quota period and at 10 ms, and on
  ``dlion-network-4``; ``OUT/regime.json`` keeps it (written once). R-DL-1 and everything on
  the compute testbed run on the setting with the largest predicted batching cut; the compute
  setting with the least runs DLion with and without batching as a measured control.
- A pilot (seed 0, reported, never reused as a measured seed) on each testbed picks every arm
  family's own eta (DLion, Gaia and Ako each from {0.005, 0.01, 0.02}: the highest mean
  accuracy over the pilot's epochs, so an eta that collapses and climbs back loses)
  and every arm runs at its family's; on ``dlion-compute-4`` it then fixes the targets on the
  rising curve: T_high, the lowest accuracy the DLion pilots (with and without batching) had at
  half their training time, at least half a point under the lowest of their plateaus; T_low,
  the same over every pilot (DLion, Gaia, Ako), a point under T_high at least; pilots on
  ``dlion-network-4`` and the 4-site testbed fix the time budgets (0.6 x the pilot DLion's
  training time: still improving there).
- R-DL-5 (first: it sets T_bs = min(10% of N, the 1-epoch knee) for every later DLion run):
  uniform batches of total 64 ... 2048, 10 epochs, accuracy after 1 and after 10 epochs.
- R-DL-1 (5 seeds at least, as R-DL-2): DLion against DLion without batching, time to T_high,
  with each worker's idle fraction; a cut above the ideal bound (1 - k C_min / sum C = 33% at
  3:1) is flagged as a measuring error. R-DL-1i: the same runs' cut in time per iteration. R-DL-1w:
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
on digits (LeNet-5 at b0 = 32 or 64 and the period the regime chooses, 30 epochs), one seed,
no control. ``--smoke`` (the test suite): R-DL-1's two arms for two epochs on digits, local
processes, the regime over LeNet-5 at b0 = 16. ``--testbed local`` runs on local
processes with slowdowns in the testbeds' ratios (no link limits; sites from the recipe; no
CPU quota, so the regime predicts one period). Every run defers its evaluation (``[train]
eval_deferred``: epoch-end snapshots scored after training), so no quota'd host spends CPU on
it while the clock runs. Resumable: a completed run is kept.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment import cli, recipes, report
from edgetrain.experiment.beds import Bed, BedSpec, bring_up
from edgetrain.experiment.claims import arm_values, median
from edgetrain.experiment.curves import accuracy_at, time_to
from edgetrain.experiment.pilot import mean_accuracy
from edgetrain.experiment.runner import Runner
from edgetrain.gossip.exchange.batching import default_t_bs
from reproductions.dlion_calibration import CALIBRATING_ARM, phase_calibrated
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
    FAMILIES,
    LRS,
    NETWORK_TAG,
    QUICK_HELP,
    R1_ARMS,
    R2_ARMS,
    R3_ARMS,
    R6_ARMS,
    R7_ARMS,
    REGIME_LR,
    SITES_SPEC,
    SMOKE_HELP,
    TABLE1,
    TESTBED_HELP,
    TOTALS,
    Plan,
    knee,
    pick_lr,
    pick_lrs,
    plan_for,
    recipe,
    same_bed,
    targets_from,
)
from reproductions.dlion_regime import (
    Setting,
    bed_spec,
    check_kept_regime,
    chosen_setting,
    needs_profile,
    phase_regime,
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
    "pick_lrs",
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
    check_kept_regime(p, out)
    runner = Runner(out, cli.say)
    res: dict[str, Any] = {"pilot": {"seed": p.pilot_seed}, "testbeds": {}, "budgets": {}}
    res["lrs"] = {}
    runs = Batches(p, runner, recipes.data(p.dataset, root), pilot=res["pilot"])
    runs.lr = p.lr if p.lr is not None else REGIME_LR  # the regime's eta (Gaia's share)
    claims = set(p.claims)

    def bed(spec: BedSpec) -> AbstractContextManager[Bed]:
        return bring_up(spec, out, p.local, cli.say, res["testbeds"])

    first = BEDS["compute"]
    done = False
    if needs_profile(out):  # the profile runs on dlion-compute-4's fast host
        with bed(first) as b:
            chosen = _regime(runs, b, res)
            if bed_spec(chosen).name == first.name:
                _compute(runs, b, res, claims)
                done = True
    else:
        chosen = _regime(runs, Bed(first), res)
    p = runs.p
    if not done:
        with bed(bed_spec(chosen)) as b:
            _compute(runs, b, res, claims)
    control = chosen_setting(res["regime"], "control")
    if control is not None and bed_spec(control).name != bed_spec(chosen).name:
        with bed(bed_spec(control)) as b:
            _control(runs, b, res, control)
    if claims & {"R-DL-3", "R-DL-6", "R-DL-7"}:
        with bed(BEDS["network"]) as b:
            _tune(runs, b, res, "network", FAMILIES)
            budget = _budget(runs, b, res, "network")
            if "R-DL-3" in claims:
                res["r_dl_3"] = runs.batch(R3_ARMS, b, "R-DL-3", p.seeds, budget, NETWORK_TAG)
            if "R-DL-6" in claims:
                res["r_dl_6"] = runs.batch(R6_ARMS, b, "R-DL-6", p.side_seeds)
            if "R-DL-7" in claims:
                res["r_dl_7"] = runs.batch(R7_ARMS, b, "R-DL-7", p.side_seeds, budget)
    if "R-DL-8" in claims:
        with bed(BEDS["sites"]) as b:
            _tune(runs, b, res, "sites", ("dlion",))
            budget = _budget(runs, b, res, "sites", "sel-off")
            res["r_dl_8"] = runs.batch(("sel-off", "sel-on"), b, "R-DL-8", p.side_seeds, budget)
    found = build_claims(res, p)
    return report.write(
        out, "dlion", "DLion", found, runner.rows, sections(res, p), {"results": res}
    )


def _regime(runs: Batches, b: Bed, res: dict[str, Any]) -> Setting:
    """Regime first: the prediction (kept in ``OUT/regime.json``), and the plan on the workload
    it chose."""
    regime = phase_regime(runs.p, b, runs.runner.out, runs.data, cli.say, runs.lr)
    res["regime"] = regime
    chosen = chosen_setting(regime)
    if chosen is None:
        raise EdgetrainError(
            f"{runs.runner.out / 'regime.json'} names no chosen setting",
            "remove it to predict the regime again (before any measured run)",
        )
    runs.p = replace(runs.p, model=chosen.model, b0=chosen.b0)
    res["setting"] = {
        "key": regime["chosen"],
        "testbed": bed_spec(chosen).name,
        "model": chosen.model,
        "b0": chosen.b0,
        "period_ms": chosen.period_ms,
    }
    return chosen


def _tune(runs: Batches, bed: Bed, res: dict[str, Any], key: str, families: Sequence[str]) -> None:
    """Every arm family's own eta on this testbed (unless the plan fixes one): a pilot of each
    family at each of LRS, the highest mean accuracy over its epochs (:func:`pick_lr`)."""
    p = runs.p
    if p.lr is not None:
        runs.lr, runs.lrs = p.lr, {}
        res["lrs"][key] = {f: p.lr for f in families}
        return
    finals: dict[str, dict[float, float | None]] = {}
    means: dict[str, dict[float, float | None]] = {}
    for family in families:
        for lr in LRS:
            runs.lrs = {family: lr}
            tag = "" if key == "compute" else f"-{key}"
            row = runs.pilot_rows((family,), bed, tag)[family]
            finals.setdefault(family, {})[lr] = row["final_accuracy"]
            mean = mean_accuracy([pt for pt in row["curve"] if pt[1] is not None])
            means.setdefault(family, {})[lr] = None if mean is None else round(mean, 4)
    runs.lrs = pick_lrs(finals, means)
    res["lrs"][key] = dict(runs.lrs)
    res["pilot"].setdefault("lr_finals", {})[key] = {
        f: {str(lr): a for lr, a in by.items()} for f, by in finals.items()
    }
    res["pilot"].setdefault("lr_means", {})[key] = {
        f: {str(lr): m for lr, m in by.items()} for f, by in means.items()
    }


def _control(runs: Batches, bed: Bed, res: dict[str, Any], s: Setting) -> None:
    """The compute setting the model predicts the least batching cut on: DLion with and without
    batching, on the ablations' seeds, at DLion's eta and the targets of the chosen setting."""
    kw = {"model": s.model, "b0": s.b0}
    seeds = runs.p.side_seeds[:2]
    res["control"] = runs.batch(
        ("dlion", "dlion-nobatch"), bed, "R-DL-1c", seeds, None, "-ctl", **kw
    )


def _compute(runs: Batches, bed: Bed, res: dict[str, Any], claims: set[str]) -> None:
    """On the chosen dlion-compute-4: every family's eta (unless fixed), R-DL-5 (which fixes
    T_bs), the targets from the pilots, then R-DL-1, R-DL-2 and R-DL-4 (and the control when it
    runs on the same testbed)."""
    p = runs.p
    families = ("dlion",) if claims == {"R-DL-1"} else FAMILIES
    _tune(runs, bed, res, "compute", families)
    res["lr"] = runs.lrs.get("dlion", runs.lr)
    n_train = N_TRAIN[p.dataset]
    start_total = len(BEDS["compute"].shares) * p.b0  # T_bs below it: none (the runs' rule)
    if "R-DL-5" in claims:
        res["r_dl_5"] = _knee_sweep(runs, bed, p.side_seeds)
        k1 = res["r_dl_5"]["knee_1"]
        runs.t_bs = default_t_bs(n_train, k1, start_total) if k1 else None
        res["r_dl_5"].update(n_train=n_train, t_bs=runs.t_bs)
    res["t_bs"] = runs.t_bs or default_t_bs(n_train, None, start_total)
    pilot_arms: tuple[str, ...] = ("dlion", "dlion-nobatch", "gaia", "ako")
    if claims == {"R-DL-1"}:
        pilot_arms = ("dlion", "dlion-nobatch")
    pilots = runs.pilot_rows(pilot_arms, bed, "")
    runs.targets = targets_from({a: r["curve"] for a, r in pilots.items()})
    res["targets"] = runs.targets
    chosen = chosen_setting(res["regime"])
    if chosen is not None and CALIBRATING_ARM in pilots:  # before the first measured run
        out, pilot = runs.runner.out, pilots[CALIBRATING_ARM]
        got = phase_calibrated(p, chosen, pilot, bed, out, runs.data, runs.lr, cli.say)
        if got is not None:
            res["regime_calibrated"] = got
    if "R-DL-1" in claims:
        res["r_dl_1"] = runs.batch(p.r1_arms, bed, "R-DL-1", p.r1_seeds)
    if "R-DL-2" in claims:
        res["r_dl_2"] = runs.batch(R2_ARMS, bed, "R-DL-2", p.r1_seeds)
    if "R-DL-4" in claims:
        res["r_dl_4"] = runs.batch([a for a, *_ in TABLE1], bed, "R-DL-4", p.side_seeds)
    control = chosen_setting(res["regime"], "control")
    if control is not None and bed_spec(control).name == bed.name:
        _control(runs, bed, res, control)


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


def _budget(runs: Batches, bed: Bed, res: dict[str, Any], key: str, arm: str = "dlion") -> float:
    """A fixed time budget for ``key``'s testbed: 0.6 x the pilot's training time there."""
    pilot = runs.pilot_rows((arm,), bed, f"-{key}")[arm]
    budget = round(0.6 * float(pilot["train_s"] or 0.0), 2)
    res["budgets"][key] = budget
    return budget


main = cli.entry("dlion", __doc__, reproduce, 5, QUICK_HELP, SMOKE_HELP, TESTBED_HELP)


if __name__ == "__main__":
    raise SystemExit(main())
