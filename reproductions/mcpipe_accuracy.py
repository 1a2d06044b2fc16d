"""Phase 5 of the mcPipe reproduction (Figs. 2 and 3): Local, data parallelism, PipeDream,
GreedyUpdates and mcPipe for the same training-time budget on 2 and 3 laptops, interleaved
seed by seed after a pilot that fixes the early and late targets."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from edgetrain.experiment.arms import Arm, interleave
from edgetrain.experiment.beds import Bed
from reproductions import mcpipe_measure as measure
from reproductions.mcpipe_plan import PIPELINES, Plan, cuts
from reproductions.mcpipe_recipes import RunSpec, Workload
from reproductions.mcpipe_runs import Ctx, bed, laptops, launch


def _spec(p: Plan, technique: str, n: int) -> tuple[Workload, RunSpec]:
    w = p.accuracy
    workers = 1 if technique == "local" else n
    if technique == "dataparallel" and w.microbatch % n:
        w = replace(w, microbatch=w.microbatch - w.microbatch % n)  # 16 -> 15 over 3 replicas
    split = cuts(w, n, "time") if technique in PIPELINES else None
    r = RunSpec(technique, workers, 0, split, budget_s=p.budget_s, snapshot_every=p.snapshot_every)
    return w, r


def topology_bed(ctx: Ctx, n: int) -> AbstractContextManager[Bed]:
    about = f"{n} laptops at 0.6 core, 2 GiB each, on 1 Gbit/s Ethernet (the paper's Fig. {n})"
    return bed(ctx, f"mcpipe-{n}", laptops(n), "1gbit", about)


def phase_accuracy(ctx: Ctx, n: int, b: Bed, got: dict[str, Any]) -> None:
    """The arms on ``n`` hosts, interleaved seed by seed (the pilot first, on the first)."""
    p = ctx.p
    if n == p.topologies[0]:
        w, r = _spec(p, "mcpipe", n)
        pilot = launch(ctx, b, w, r, f"pilot-{n}-mcpipe", p.pilot_seed)
        got["pilot"] = {"seed": p.pilot_seed, "run": pilot.get("run"),
                        "curve": measure.curve(pilot)}  # fmt: skip
    arms = {}
    for t in p.techniques:
        if t != "local" or n == p.topologies[0]:  # Local runs once, on one host
            arms[f"acc{n}-{t}"] = (t, *_spec(p, t, n))
    for arm, seed in interleave([Arm(k, "") for k in arms], p.seeds):
        t, w, r = arms[arm.name]
        summary = launch(ctx, b, w, r, arm.name, seed)
        got.setdefault("summaries", {})[f"{arm.name}-s{seed}"] = (n, t, seed, summary)


def targets_of(pilot_curve: Sequence[dict[str, Any]], budget: float) -> dict[str, float]:
    """The pilot's accuracy at a quarter of the budget (early) and at half of it (late): levels
    a run like the pilot's reaches well inside the budget, whatever its seed."""
    out = {}
    for name, share in (("early", 0.25), ("late", 0.5)):
        got = measure.accuracy_at(pilot_curve, budget * share)
        if got is None and pilot_curve:
            got = pilot_curve[0]["accuracy"]
        if got is not None:
            out[name] = round(got, 4)
    return out
