"""Phases 2 and 3 of the mcPipe reproduction: memory per stage on hosts with memory to spare
(every configuration and technique, one seed; the deepest mcPipe run replayed in the
simulator), then a host limited between the two techniques' peaks, where PipeDream is killed
for lack of memory and mcPipe finishes."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment.arms import Arm
from edgetrain.experiment.beds import Bed
from edgetrain.experiment.claims import Row
from edgetrain.experiment.kept import kept
from edgetrain.experiment.runs import run_dir
from edgetrain.experiment.testbed import Testbed
from reproductions import mcpipe_measure as measure
from reproductions.mcpipe_plan import MemConfig
from reproductions.mcpipe_recipes import HostSpec, recipe
from reproductions.mcpipe_runs import BIG_MEMORY, LAPTOP, Ctx, bed, laptops, launch


def memory_bed(ctx: Ctx) -> AbstractContextManager[Bed]:
    n = max(c.stages for c in ctx.p.memory)
    about = "mcpipe-3's hosts with memory to spare: memory measured, nothing killed"
    return bed(ctx, "mcpipe-mem", laptops(n, BIG_MEMORY), "1gbit", about)


def phase_memory(ctx: Ctx, b: Bed) -> list[Row]:
    """Every memory configuration and technique, 3 m_0 + 10 microbatches, one seed."""
    rows: list[Row] = []
    for c in ctx.p.memory:
        for tech in c.techniques:
            summary = launch(ctx, b, c.workload, c.run(tech), f"mem-{c.key}-{tech}", 1)
            for st in measure.stages(summary):
                rows.append(
                    {"config": c.key, "model": c.workload.label, "stages": c.stages,
                     "extra": c.extra, "partition": c.partition, "split": list(c.split),
                     "technique": tech, "model_sha256": summary.get("model_sha256"),
                     "run": summary.get("run"), **st}
                )  # fmt: skip
    return rows


def replayed(ctx: Ctx) -> dict[str, Any]:
    """T14 on the testbed: the deepest mcPipe memory run of the FC-heavy MLP, replayed in the
    in-process simulator."""
    from reproductions.mcpipe_sim import simulated_sha

    mlp = [c for c in ctx.p.memory if c.workload.model == "mlp" and "mcpipe" in c.techniques]
    if not mlp:
        return {}
    c = max(mlp, key=lambda c: (c.m0, c.stages))
    name = f"mem-{c.key}-mcpipe"
    summary = ctx.summaries.get(f"{name}-s1", {})
    ctx.say(f"replaying {name} in the simulator")
    sha = simulated_sha(recipe(c.workload, c.run("mcpipe"), name), 1, c.split)
    return {"run": name, "run_sha256": summary.get("model_sha256"), "simulator_sha256": sha,
            "equal": sha == summary.get("model_sha256")}  # fmt: skip


def _cgroup_counters(tb: Testbed, host: str) -> dict[str, int]:
    from edgetrain.emulate import cgroups

    d = cgroups.memory_dir(tb.name, host)
    out: dict[str, int] = {}
    try:
        for line in (d / "memory.oom_control").read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                out[key] = int(value)
        out["failcnt"] = int((d / "memory.failcnt").read_text())
        out["limit_bytes"] = int((d / "memory.limit_in_bytes").read_text())
    except (OSError, ValueError):
        pass
    return out


def phase_fits(ctx: Ctx, memory: list[Row]) -> dict[str, Any]:
    """Stage 0's host limited halfway between the two measured peaks."""
    c = ctx.p.fits
    if c is None:
        return {}
    peaks = {
        r["technique"]: r["cgroup_peak"]
        for r in memory
        if r["config"] == c.key and r["index"] == 0 and r["cgroup_peak"]
    }
    if set(peaks) != {"pipedream", "mcpipe"}:
        return {"skipped": "phase 2 measured no cgroup peaks for this configuration"}
    return dict(kept(ctx.out / "fits.json", lambda: _fits(ctx, c, peaks, memory)))


def _fits(ctx: Ctx, c: MemConfig, peaks: dict[str, int], memory: list[Row]) -> dict[str, Any]:
    """PipeDream and mcPipe with stage 0's host limited to the mean of their peaks."""
    limit = (peaks["pipedream"] + peaks["mcpipe"]) // 2
    mib = limit // 2**20
    hosts = [
        HostSpec("laptop-1", LAPTOP.cpu, f"{mib}m"),
        HostSpec("laptop-2", LAPTOP.cpu, BIG_MEMORY),
    ]
    about = f"stage 0's host limited to {mib} MiB, between mcPipe's and PipeDream's peaks"
    result: dict[str, Any] = {"config": c.key, "peaks": peaks, "limit_bytes": mib * 2**20}
    with bed(ctx, "mcpipe-fit", hosts, "1gbit", about) as b:
        assert b.tb is not None
        for tech in ("pipedream", "mcpipe"):
            name = f"fit-{c.key}-{tech}"
            before = _cgroup_counters(b.tb, "laptop-1")
            try:
                summary = launch(ctx, b, c.workload, c.run(tech), name, 1)
                error = None
            except EdgetrainError as exc:
                path = run_dir(ctx.out, Arm(name, ""), 1) / "report" / "summary.json"
                summary = json.loads(path.read_text()) if path.is_file() else {}
                error = str(exc)
            after = _cgroup_counters(b.tb, "laptop-1")
            result[tech] = {
                "status": summary.get("status"),
                "error": summary.get("error") or error,
                "model_sha256": summary.get("model_sha256"),
                "oom_kills": after.get("oom_kill", 0) - before.get("oom_kill", 0),
                "limit_hits": after.get("failcnt", 0) - before.get("failcnt", 0),
                "cgroup_limit_bytes": after.get("limit_bytes"),
                "run": summary.get("run"),
            }
    reference = [r for r in memory if r["config"] == c.key and r["technique"] == "mcpipe"]
    result["unlimited_mcpipe_sha256"] = reference[0]["model_sha256"] if reference else None
    return result
