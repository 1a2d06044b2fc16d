"""Phase 5 of the mcPipe reproduction (Figs. 2 and 3): Local, data parallelism, PipeDream,
GreedyUpdates and mcPipe for the same training-time budget on 2 and 3 laptops, interleaved
seed by seed after a pilot that fixes the early and late targets."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from edgetrain.experiment.arms import Arm, interleave
from edgetrain.experiment.beds import Bed
from reproductions import mcpipe_measure as measure
from reproductions.mcpipe_plan import PIPELINES, Plan, cuts
from reproductions.mcpipe_recipes import RunSpec, Workload
from reproductions.mcpipe_runs import Ctx, bed, laptops, launch


def arm_spec(
    p: Plan, w: Workload, technique: str, n: int, extra: int = 0
) -> tuple[Workload, RunSpec]:
    """One arm of ``w`` on ``n`` hosts: Local on one, the others on all ``n`` (data parallelism
    with the microbatch cut to split evenly), pipelines on the min-max cuts."""
    workers = 1 if technique == "local" else n
    if technique == "dataparallel" and w.microbatch % n:
        w = replace(w, microbatch=w.microbatch - w.microbatch % n)  # 16 -> 15 over 3 replicas
    split = cuts(w, n, "time") if technique in PIPELINES else None
    r = RunSpec(
        technique, workers, extra, split, budget_s=p.budget_s, snapshot_every=p.snapshot_every
    )
    return w, r


def _spec(p: Plan, technique: str, n: int) -> tuple[Workload, RunSpec]:
    return arm_spec(p, p.accuracy, technique, n)


def topology_bed(ctx: Ctx, n: int) -> AbstractContextManager[Bed]:
    about = f"{n} laptops at 0.6 core, 2 GiB each, on 1 Gbit/s Ethernet (the paper's Fig. {n})"
    return bed(ctx, f"mcpipe-{n}", laptops(n), "1gbit", about)


PILOT_ARMS = ("mcpipe", "local")  # two pilots: the targets hold for the slowest learner too


def link_bed(ctx: Ctx, n: int, lan: str) -> AbstractContextManager[Bed]:
    """``n`` laptops joined by ``lan`` (a setting of the regime map away from 1 Gbit/s)."""
    about = f"{n} laptops at 0.6 core, 2 GiB each, on a {lan} link (a setting of the regime map)"
    return bed(ctx, f"mcpipe-{n}-{lan}", laptops(n), lan, about)


def phase_accuracy(
    ctx: Ctx,
    n: int,
    b: Bed,
    got: dict[str, Any],
    after_pilots: Callable[[Mapping[str, Any]], None] | None = None,
) -> None:
    """The arms on ``n`` hosts, interleaved seed by seed (the pilots first, on the first;
    ``after_pilots`` is given their summaries before the first measured run)."""
    p = ctx.p
    first = n == p.topologies[0]
    if first:
        summaries = {}
        for t in PILOT_ARMS:
            w, r = _spec(p, t, n)
            pilot = launch(ctx, b, w, r, f"pilot-{n}-{t}", p.pilot_seed)
            summaries[t] = pilot
            doc = {"seed": p.pilot_seed, "run": pilot.get("run"), "curve": measure.curve(pilot)}
            got.setdefault("pilots", {})[t] = doc
            if t == "mcpipe":
                got["pilot"] = doc
        if after_pilots is not None:
            after_pilots(summaries)
    arms: dict[str, tuple[str, Workload, RunSpec]] = {}
    for t in p.techniques:
        if t != "local" or first:  # Local runs once, on one host
            arms[f"acc{n}-{t}"] = (t, *_spec(p, t, n))
    if first and p.greedy_stale and "greedy" in p.techniques:
        e = p.greedy_stale
        arms[f"acc{n}-greedy-e{e}"] = (f"greedy-e{e}", *arm_spec(p, p.accuracy, "greedy", n, e))
    for arm, seed in interleave([Arm(k, "") for k in arms], p.seeds):
        label, w, r = arms[arm.name]
        summary = launch(ctx, b, w, r, arm.name, seed)
        got.setdefault("summaries", {})[f"{arm.name}-s{seed}"] = (n, label, seed, summary)


def phase_extra(
    ctx: Ctx,
    key: str,
    w: Workload,
    hosts: int,
    techniques: Sequence[str],
    b: Bed,
    got: dict[str, Any],
) -> None:
    """One more setting of the regime map: its arms, interleaved on the first seeds."""
    p = ctx.p
    seeds = p.seeds[: p.extra_seeds]
    arms = {f"x-{key}-{t}": (t, *arm_spec(p, w, t, hosts)) for t in techniques}
    for arm, seed in interleave([Arm(k, "") for k in arms], seeds):
        t, aw, r = arms[arm.name]
        summary = launch(ctx, b, aw, r, arm.name, seed)
        got.setdefault("extra", {})[f"{arm.name}-s{seed}"] = (key, hosts, t, seed, summary)


def targets_of(pilot_curves: Sequence[Sequence[dict[str, Any]]], budget: float) -> dict[str, float]:
    """The targets, from every pilot (mcPipe and Local): early, the lowest of their accuracies
    at a quarter of the budget; late, the lowest at half of it, and at least half a point under
    the lowest pilot's plateau (its best accuracy over the second half of the budget), so that
    no single lucky pilot puts a target where other runs level off. Pure."""
    out: dict[str, float] = {}
    curves = [c for c in pilot_curves if c]
    if not curves:
        return out
    for name, share in (("early", 0.25), ("late", 0.5)):
        got = []
        for c in curves:
            v = measure.accuracy_at(c, budget * share)
            got.append(c[0]["accuracy"] if v is None else v)
        out[name] = min(got)
    plateaus = []
    for c in curves:
        tail = [q["accuracy"] for q in c if (q["train_s"] or 0.0) >= budget / 2]
        plateaus.append(max(tail) if tail else c[-1]["accuracy"])
    out["late"] = min(out["late"], min(plateaus) - 0.005)
    out["early"] = min(out["early"], out["late"])
    return {k: round(v, 4) for k, v in out.items()}
