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
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.reproduce import cli, report
from edgetrain.reproduce import mcpipe_claims as claims
from edgetrain.reproduce import mcpipe_measure as measure
from edgetrain.reproduce.mcpipe_recipes import (
    MLP_WIDE,
    HostSpec,
    RunSpec,
    Workload,
    hosts_text,
    recipe,
    slots,
    testbed_text,
)
from edgetrain.reproduce.runs import Arm, interleave, run_arm, run_dir
from edgetrain.reproduce.testbed import Testbed, testbed, verify_markdown
from edgetrain.rundir import atomic_write_json
from edgetrain.tomlconfig import loads

REPO = Path(__file__).resolve().parents[2]
Say = Callable[[str], None]
LAPTOP = HostSpec("laptop-1", 0.6, "2g")  # mcpipe-3's hosts (recipes/testbeds/mcpipe-3.toml)
BIG_MEMORY = "8g"
LINK_RATE = "10mbit"
LINK_BPS = 10e6
LINK_EXTRA = 2
TECHNIQUES = ("local", "dataparallel", "pipedream", "greedy", "mcpipe")
PIPELINES = ("pipedream", "greedy", "mcpipe")
RUN_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class MemConfig:
    """One memory configuration: a workload cut into ``split`` with window +``extra``."""

    workload: Workload
    split: tuple[int, ...]
    extra: int
    partition: str  # how the cuts were made: "time", "params" or "spec" (§7.5's)
    techniques: tuple[str, ...] = ("pipedream", "mcpipe")

    @property
    def stages(self) -> int:
        return len(self.split)

    @property
    def m0(self) -> int:
        return self.stages + self.extra

    @property
    def key(self) -> str:
        return f"{self.workload.label}-n{self.stages}-{self.partition}-e{self.extra}"

    def run(self, technique: str) -> RunSpec:
        # heartbeats every 5 s: a stage of VGG16 hands in up to 0.5 GB at the end, and a long
        # transfer delays the heartbeats behind it on the host's link
        return RunSpec(
            technique, self.stages, self.extra, self.split, evaluator=False,
            microbatches=3 * self.m0 + 10, epochs=1, memory=True, heartbeat_s=5.0,
        )  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """Everything a reproduction runs."""

    mode: str  # full, quick or smoke
    seeds: tuple[int, ...]
    local: bool  # local processes instead of emulated testbeds
    accuracy: Workload
    budget_s: float
    snapshot_every: int
    topologies: tuple[int, ...]
    techniques: tuple[str, ...]
    memory: tuple[MemConfig, ...]
    sim: tuple[tuple[str, dict[str, Any], tuple[int, ...], int], ...]  # model, options, split, e
    fits: MemConfig | None = None
    link: bool = False
    pilot_seed: int = 0


def unit_infos(w: Workload) -> list[Any]:
    """The workload's unit table (built on the meta device)."""
    import torch

    from edgetrain.models import build_model
    from edgetrain.pipeline.chain import build_units
    from edgetrain.pipeline.table import unit_table

    shape = (1, 8, 8) if w.dataset == "digits" else (1, 28, 28)
    with torch.device("meta"):
        model = build_model(w.model, shape, 10, dict(w.options))
    return unit_table(build_units(model, w.model), shape)


def cuts(w: Workload, stages: int, objective: str) -> tuple[int, ...]:
    """Units per stage of the exact min-max partition (PipeDream's costs, so that every
    technique runs the same cuts), with multiply-accumulates standing for time."""
    from edgetrain.pipeline.costs import Setting, cost_function
    from edgetrain.pipeline.partition import partition

    infos = unit_infos(w)
    st = Setting(technique="pipedream", stages=stages, microbatch=w.microbatch)
    part = partition(len(infos), stages, cost_function(infos, objective, st))
    return tuple(hi - lo for lo, hi in part.bounds)


def replay_estimates(w: Workload, split: Sequence[int]) -> list[dict[str, Any]]:
    """mcPipe's extra compute per stage (window +0) over PipeDream's: the specification's
    w_s/3, and the same count from the units' multiply-accumulates (a forward, an input error
    (none for the first unit of stage 0) and a weight gradient each cost about one, a replay
    one weight gradient per pending update)."""
    infos = unit_infos(w)
    out, lo = [], 0
    for s, k in enumerate(split):
        part = infos[lo : lo + k]
        lo += k
        pending = len(split) - s - 1
        dw = sum(u.macs for u in part)
        di = sum(u.macs for i, u in enumerate(part) if s > 0 or i > 0)
        base = 2 * dw + di
        macs = pending * dw / base if base else 0.0
        out.append({"stage": s, "w": pending, "spec": pending / 3, "macs": macs})
    return out


def plan_for(args: argparse.Namespace, root: Path | None) -> Plan:
    seeds = tuple(range(1, args.seeds + 1))
    if args.smoke:
        small = Workload("digits", "mlp", {"hidden": [256, 256, 256]})
        return Plan(
            "smoke", (1,), True, small, 1.0, 20, (2,), ("pipedream", "mcpipe"),
            (MemConfig(small, (2, 2), 2, "spec"),),
            (("mlp", {}, (1, 2), 1),),
        )  # fmt: skip
    if args.quick:
        q = cli.quick_seeds(args, seeds)
        wide = Workload("digits", "mlp", MLP_WIDE)
        return Plan(
            "quick", q, False, wide, 20.0, 45, (2,), TECHNIQUES,
            (MemConfig(wide, (2, 2), 2, "spec", (*PIPELINES,)),),
            (("mlp", MLP_WIDE, (2, 2), 0), ("mlp", MLP_WIDE, (2, 2), 2)),
        )  # fmt: skip
    wide = Workload("mnist", "mlp", MLP_WIDE, root=root)
    vgg = Workload("mnist", "vgg16", lr=0.01, root=root)
    memory = [
        MemConfig(wide, split, e, "spec", PIPELINES)
        for split in ((2, 2), (2, 1, 1))
        for e in (0, 1)
    ]
    for n in (2, 3):
        for objective in ("time", "params"):
            memory.append(MemConfig(vgg, cuts(vgg, n, objective), 0, objective))
    fits = MemConfig(vgg, cuts(vgg, 2, "params"), 2, "params")
    memory.append(fits)
    digits_wide = {"hidden": [2048, 2048, 2048]}
    sim = tuple(
        (model, options, split, e)
        for model, options in (("cnn2", {}), ("mlp", digits_wide))
        for split in ((2, 2), (1, 2, 1))
        for e in (0, 1)
    )
    return Plan(
        "full", seeds, False, wide, 90.0, 125, (2, 3), TECHNIQUES, tuple(memory), sim, fits, True
    )


# ------------------------------------------------------------------ testbeds and runs


@dataclass
class Ctx:
    """The reproduction's output directory, plan, progress lines and what it found."""

    out: Path
    p: Plan
    say: Say
    results: dict[str, Any] = field(default_factory=dict)
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Bed:
    """Where a batch of runs goes: an emulated testbed of ``hosts`` hosts, or local processes."""

    name: str
    hosts: int
    tb: Testbed | None = None

    def hosts_file(self, out: Path, r: RunSpec) -> Path | None:
        if self.tb is None:
            return None
        per = slots(r, self.hosts)
        data = loads(self.tb.hosts_file.read_text())
        path = out / "hosts" / f"{self.tb.name}-{'-'.join(map(str, per))}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(hosts_text(data, per))
        return path


@contextmanager
def bed(ctx: Ctx, name: str, hosts: Sequence[HostSpec], lan: str, about: str) -> Iterator[Bed]:
    """``edgetrain emulate up --verify`` a testbed for a batch of runs, then down."""
    if ctx.p.local:
        yield Bed(name, len(hosts))
        return
    spec = ctx.out / "testbeds" / f"{name}.toml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(testbed_text(name, hosts, lan, about))
    ctx.say(f"bringing up and verifying testbed {name}")
    with testbed(spec, name) as tb:
        ctx.results.setdefault("testbeds", {})[name] = verify_markdown(tb)
        yield Bed(name, len(hosts), tb)


def laptops(n: int, memory: str = "2g", cpu: float = LAPTOP.cpu) -> list[HostSpec]:
    return [HostSpec(f"laptop-{k}", cpu, memory) for k in range(1, n + 1)]


def launch(ctx: Ctx, b: Bed, w: Workload, r: RunSpec, name: str, seed: int) -> dict[str, Any]:
    """One arm at one seed (kept if it completed before)."""
    arm = Arm(name, recipe(w, r, name))
    summary = run_arm(
        ctx.out, arm, seed, b.hosts_file(ctx.out, r), timeout_s=RUN_TIMEOUT_S, say=ctx.say
    )
    ctx.summaries[f"{name}-s{seed}"] = summary
    return summary


# ------------------------------------------------------------------ phase 1: correctness


def phase_sim(ctx: Ctx) -> list[dict[str, Any]]:
    from edgetrain.reproduce.mcpipe_sim import per_microbatch

    done = ctx.out / "correctness.json"
    if done.is_file():
        return list(json.loads(done.read_text()))
    ctx.say("mcPipe against PipeDream per microbatch, in one process")
    rows = [
        per_microbatch(model, options, "digits", split, e) for model, options, split, e in ctx.p.sim
    ]
    atomic_write_json(done, rows)
    return rows


# ------------------------------------------------------------------ phase 2: memory


def memory_bed(ctx: Ctx) -> Any:
    n = max(c.stages for c in ctx.p.memory)
    about = "mcpipe-3's hosts with memory to spare: memory measured, nothing killed"
    return bed(ctx, "mcpipe-mem", laptops(n, BIG_MEMORY), "1gbit", about)


def phase_memory(ctx: Ctx, b: Bed) -> list[dict[str, Any]]:
    """Every memory configuration and technique, 3 m_0 + 10 microbatches, one seed."""
    rows: list[dict[str, Any]] = []
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
    from edgetrain.reproduce.mcpipe_sim import simulated_sha

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


# ------------------------------------------------------------------ phase 3: fits


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


def phase_fits(ctx: Ctx, memory: list[dict[str, Any]]) -> dict[str, Any]:
    """Stage 0's host limited halfway between the two measured peaks."""
    c = ctx.p.fits
    if c is None:
        return {}
    done = ctx.out / "fits.json"
    if done.is_file():
        return dict(json.loads(done.read_text()))
    peaks = {
        r["technique"]: r["cgroup_peak"]
        for r in memory
        if r["config"] == c.key and r["index"] == 0 and r["cgroup_peak"]
    }
    if set(peaks) != {"pipedream", "mcpipe"}:
        return {"skipped": "phase 2 measured no cgroup peaks for this configuration"}
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
    atomic_write_json(done, result)
    return result


# ------------------------------------------------------------------ phase 4: link


def phase_link(ctx: Ctx) -> dict[str, Any]:
    """PipeDream's activations and errors on a 10 Mbit/s tbf link."""
    if not ctx.p.link:
        return {}
    # One hidden layer of 2048: activations of 128 KiB per microbatch (105 ms at 10 Mbit/s)
    # against a few ms of compute, and few weights to hand in at the end over the slow link
    # (a long hand-in delays heartbeats behind it: they get 10 s here). Stage 1 holds only the
    # classifier, so it waits for every activation and takes it the moment it lands: its inbox
    # times the link exactly. (Stage 0 computes while errors arrive and takes some late, which
    # makes their link look slower than it is.)
    w = replace(ctx.p.accuracy, options={"hidden": [2048]})
    r = RunSpec(
        "pipedream", 2, LINK_EXTRA, (1, 1), evaluator=False, microbatches=150, epochs=1,
        heartbeat_s=10.0,
    )  # fmt: skip
    about = "two mcpipe-3 hosts on a 10 Mbit/s link: transfers are the bottleneck"
    with bed(ctx, "mcpipe-link", laptops(2), LINK_RATE, about) as b:
        summary = launch(ctx, b, w, r, f"link-{w.label}-pipedream-e{LINK_EXTRA}", 1)
        verified = [
            link.get("measured_bps")
            for link in (b.tb.verify.get("links", []) if b.tb else [])
            if link.get("measured_bps")
        ]
    from edgetrain.emulate.topology import burst_bytes

    st = measure.stages(summary)
    inboxes = {
        "activations": (st[1]["link_arrived"].get("act") or {}) if len(st) > 1 else {},
        "errors": (st[0]["link_arrived"].get("grad") or {}) if st else {},
    }
    return {
        "rate_bps": LINK_BPS,
        "burst_bytes": burst_bytes(int(LINK_BPS)),
        "inboxes": inboxes,
        "verified_bps": verified[0] if verified else None,
        "activations_bps": measure.link_rate(st[1], "act") if len(st) > 1 else None,
        "errors_bps": measure.link_rate(st[0], "grad") if st else None,
        "span_activations_bps": (st[1]["link_arrived"].get("act") or {}).get("rate_bps")
        if len(st) > 1
        else None,
        "busy": [s["busy"] for s in st],
        "run": summary.get("run"),
    }


# ------------------------------------------------------------------ phase 5: accuracy


def _spec(p: Plan, technique: str, n: int) -> tuple[Workload, RunSpec]:
    w = p.accuracy
    workers = 1 if technique == "local" else n
    if technique == "dataparallel" and w.microbatch % n:
        w = replace(w, microbatch=w.microbatch - w.microbatch % n)  # 16 -> 15 over 3 replicas
    split = cuts(w, n, "time") if technique in PIPELINES else None
    r = RunSpec(technique, workers, 0, split, budget_s=p.budget_s, snapshot_every=p.snapshot_every)
    return w, r


def topology_bed(ctx: Ctx, n: int) -> Any:
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


# ------------------------------------------------------------------ main


def reproduce(args: argparse.Namespace) -> dict[str, Any]:
    if args.seeds < 1:
        raise EdgetrainError("--seeds must be at least 1")
    root = None if (args.smoke or args.quick) else cli.data_root(args.data_root)
    p = plan_for(args, root)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(out, p, cli.say)
    res = ctx.results
    res["correctness"] = phase_sim(ctx)
    acc: dict[str, Any] = {"pilot": {}, "summaries": {}}
    if p.mode == "quick":  # one testbed for everything
        with topology_bed(ctx, p.topologies[0]) as b:
            res["memory"] = phase_memory(ctx, b)
            phase_accuracy(ctx, p.topologies[0], b, acc)
    else:
        with memory_bed(ctx) as b:
            res["memory"] = phase_memory(ctx, b)
    res["replayed"] = replayed(ctx)
    res["fits"] = phase_fits(ctx, res["memory"])
    res["link"] = phase_link(ctx)
    if p.mode != "quick":
        for n in p.topologies:
            with topology_bed(ctx, n) as b:
                phase_accuracy(ctx, n, b, acc)
    res["pilot"] = acc["pilot"]
    res["replay_estimates"] = {
        str(n): replay_estimates(p.accuracy, cuts(p.accuracy, n, "time")) for n in p.topologies
    }
    res["targets"] = targets_of(acc["pilot"].get("curve", []), p.budget_s)
    rows = [
        measure.accuracy_row(s, t, seed, n, res["targets"], p.budget_s)
        for n, t, seed, s in acc["summaries"].values()
    ]
    res["accuracy"] = rows
    built = claims.build(res, p)
    sections = claims.sections(res, p)
    runs = [{k: v for k, v in r.items() if k != "curve"} for r in rows]
    return report.write(out, "mcpipe", "mcPipe", built, runs, sections, {"results": res})


def main(argv: Sequence[str] | None = None) -> int:
    ap = cli.parser(
        "mcpipe",
        __doc__,
        quick="two stages on digits, one seed, on the emulated testbed (<10 min)",
        smoke="the test suite's path: local processes, digits, a small MLP (<2 min)",
        seeds=3,
    )
    return cli.run(ap, argv, reproduce)


if __name__ == "__main__":
    raise SystemExit(main())
