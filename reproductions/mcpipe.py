"""Reproduce mcPipe (Li, Seferoglu, Dasari, Koyuncu) on the emulated testbed: the accuracy
ordering of its Figs. 2 and 3, the memory it saves per stage (and where it does not), a device
whose memory fits mcPipe but not PipeDream, and the goals of issue 16.

``scripts/reproduce-mcpipe [--quick] [--seeds N] [--out DIR] [--format json]``

What runs (shared/specs/pipeline.md §12), each phase resumable (a run whose summary says it
completed is kept in ``OUT/runs/``):

1. Correctness, in one process: PipeDream against mcPipe per microbatch (the digest of the
   weights every operation used) on cnn2 and the FC-heavy MLP, 2 and 3 stages, window +0/+1.
2. Memory, on ``mcpipe-mem`` (mcpipe-3's hosts with 8 GiB, so that nothing is killed while
   measured): the FC-heavy MLP 784-2048-2048-2048-10 (N = 2, 3; e = 0, 1; PipeDream, mcPipe,
   GreedyUpdates) and VGG16 (28 -> 32, N = 2, 3, cut by time and by parameters), 3 m_0 + 10
   microbatches each; every stage's five memory figures beside the paper's bound and the
   specification's general one. One mcPipe run is replayed in the simulator (same sha256).
3. Fits / does not fit, on ``mcpipe-fit``: VGG16 by parameters at a window of 4, stage 0's
   host limited halfway between the two cgroup peaks phase 2 measured: PipeDream is killed
   for lack of memory, mcPipe finishes (with phase 2's weights).
4. Link, on ``mcpipe-link`` (2 hosts on 10 Mbit/s): PipeDream (window +2) on an MLP with one
   hidden layer of 2048, the classifier alone on stage 1, so that stage 1 waits for every
   activation; the bytes that arrived over
   what tbf lets through in the link's busy time (the union of every message's [sent,
   arrived] interval, plus one burst per busy period).
5. Accuracy against training time (Figs. 2, 3), on ``mcpipe-2`` and ``mcpipe-3``: Local, data
   parallelism, PipeDream, GreedyUpdates and mcPipe, interleaved seed by seed, each for the same
   training-time budget, snapshots scored after the run (evaluation is not on the clock). A
   pilot (mcPipe, 2 stages, seed 0; reported, never reused) fixes the early and late targets
   (its accuracy at a quarter and at half of the budget).

``--quick``: phases 1, 2 (the MLP at a window of 4) and 5 on one ``mcpipe-2`` testbed with
digits, one seed. ``--smoke`` (the test suite): local processes, digits, a small MLP, one seed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from edgetrain.experiment import cli, report
from edgetrain.experiment.beds import Bed
from edgetrain.experiment.runner import Runner
from reproductions import mcpipe_claims as claims
from reproductions import mcpipe_measure as measure
from reproductions.mcpipe_accuracy import (
    link_bed,
    phase_accuracy,
    phase_extra,
    targets_of,
    topology_bed,
)
from reproductions.mcpipe_calibration import phase_calibrated
from reproductions.mcpipe_link import phase_link
from reproductions.mcpipe_memory import memory_bed, phase_fits, phase_memory, replayed
from reproductions.mcpipe_plan import QUICK_HELP, SMOKE_HELP, Plan, cuts, plan_for, replay_estimates
from reproductions.mcpipe_regime import check_kept_regime, chosen_workload, phase_regime
from reproductions.mcpipe_runs import RUN_TIMEOUT_S, Ctx
from reproductions.mcpipe_sim import phase_sim
from reproductions.mcpipe_text import sections

# the paper's plan, arms and claims, as its tests and readers use them
__all__ = ["Plan", "main", "plan_for", "reproduce"]


def reproduce(args: argparse.Namespace) -> dict[str, Any]:
    """Run the mode's plan into ``--out`` (what ran before is kept) and write the report."""
    cli.measured_seeds(args)  # --seeds checked before anything is made
    out, root = cli.out_dir(args, not (args.smoke or args.quick))
    p = plan_for(args, root)
    check_kept_regime(p, out)
    ctx = Ctx(p, Runner(out, cli.say, RUN_TIMEOUT_S))
    res = ctx.results
    res["correctness"] = phase_sim(ctx)
    acc: dict[str, Any] = {"pilot": {}, "summaries": {}}
    if p.mode == "quick":  # one testbed for everything
        with topology_bed(ctx, p.topologies[0]) as b:
            res["memory"] = phase_memory(ctx, b)
            p = _regime(ctx, b)
            phase_accuracy(ctx, p.topologies[0], b, acc, _calibrated(ctx, p.topologies[0], b))
    else:
        with memory_bed(ctx) as b:
            res["memory"] = phase_memory(ctx, b)
    res["replayed"] = replayed(ctx)
    res["fits"] = phase_fits(ctx, res["memory"])
    res["link"] = phase_link(ctx)
    if p.mode != "quick":
        for n in p.topologies:
            with topology_bed(ctx, n) as b:
                if n == p.topologies[0]:
                    p = _regime(ctx, b)
                phase_accuracy(ctx, n, b, acc, _calibrated(ctx, n, b))
                for key, w, hosts, lan, arms in p.extra:
                    if lan == "1gbit" and hosts == n and w is not None:
                        phase_extra(ctx, key, w, hosts, arms, b, acc)
        for key, w, hosts, lan, arms in p.extra:
            if lan != "1gbit" or hosts not in p.topologies or w is None:
                with link_bed(ctx, hosts, lan) as b:
                    phase_extra(ctx, key, w or p.accuracy, hosts, arms, b, acc)
    res["pilot"] = acc["pilot"]
    res["pilots"] = {t: {k: v for k, v in d.items() if k != "curve"}
                     for t, d in (acc.get("pilots") or {}).items()}  # fmt: skip
    res["replay_estimates"] = {
        str(n): replay_estimates(p.accuracy, cuts(p.accuracy, n, "time")) for n in p.topologies
    }
    curves = [d.get("curve", []) for d in (acc.get("pilots") or {}).values()]
    res["targets"] = targets_of(curves, p.budget_s)
    rows = [
        measure.accuracy_row(s, t, seed, n, res["targets"], p.budget_s)
        for n, t, seed, s in acc["summaries"].values()
    ]
    res["accuracy"] = rows
    res["extra"] = [
        {**measure.accuracy_row(s, t, seed, hosts, res["targets"], p.budget_s), "setting": key}
        for key, hosts, t, seed, s in (acc.get("extra") or {}).values()
    ]
    built = claims.build(res, p)
    runs = [{k: v for k, v in r.items() if k != "curve"} for r in rows + res["extra"]]
    return report.write(out, "mcpipe", "mcPipe", built, runs, sections(res, p), {"results": res})


def _regime(ctx: Ctx, b: Bed) -> Plan:
    """Regime first: the prediction (kept), and the plan with the workload it chose."""
    regime = phase_regime(ctx, b)
    ctx.results["regime"] = regime
    ctx.p = replace(ctx.p, accuracy=chosen_workload(ctx.p, regime))
    return ctx.p


def _calibrated(ctx: Ctx, n: int, b: Bed) -> Callable[[Mapping[str, Any]], None]:
    """After the pilots: the cost model calibrated on them (kept in the results)."""

    def after(pilots: Mapping[str, Any]) -> None:
        doc = phase_calibrated(ctx, n, b, pilots)
        if doc is not None:
            ctx.results["regime_calibrated"] = doc

    return after


main = cli.entry("mcpipe", __doc__, reproduce, 5, QUICK_HELP, SMOKE_HELP)


if __name__ == "__main__":
    raise SystemExit(main())
