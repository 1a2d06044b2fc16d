"""The mcPipe report's sections: the setup, accuracy against training time per topology,
memory per stage and where mcPipe does not save, its extra compute, the correctness checks,
the testbeds and the pilot. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from edgetrain.experiment.claims import Row, number
from edgetrain.experiment.claims import ratio as _ratio
from edgetrain.experiment.text import fmt, spread
from reproductions.mcpipe_claims import ARMS, MiB, arm_runs, no_saving, pairs_of
from reproductions.mcpipe_measure import replay_share
from reproductions.mcpipe_regime_claims import per_microbatch, regime_table


def accuracy_table(rows: Sequence[Row], n: int, targets: Mapping[str, float]) -> str:
    lines = [
        f"Targets (from the pilot): early {fmt(targets.get('early'), '.4f')}, late "
        f"{fmt(targets.get('late'), '.4f')}. Median [min, max] over seeds; times are training "
        "seconds (snapshot sending and evaluation excluded).",
        "",
        "| arm | time to early s | time to late s | accuracy at budget | final accuracy | "
        "trained s | microbatches |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for arm in ARMS:
        mine = list(arm_runs(rows, arm, n).values())
        if not mine:
            continue
        mbs = [(r["curve"][-1]["microbatches"] if r["curve"] else None) for r in mine]
        lines.append(
            f"| {arm} | {spread([r['time_to_early'] for r in mine])} | "
            f"{spread([r['time_to_late'] for r in mine])} | "
            f"{spread([r['at_budget'] for r in mine], '.4f')} | "
            f"{spread([r['final_accuracy'] for r in mine], '.4f')} | "
            f"{spread([r['final_train_s'] for r in mine], '.1f')} | {spread(mbs, '.0f')} |"
        )
    return "\n".join(lines)


def extra_table(rows: Sequence[Row]) -> str:
    """A setting of the regime map beyond the figures (cnn2, a slow link): per arm, its speed
    and its accuracy (times to the headline's targets only where the workload is the same)."""
    lines = [
        "Median [min, max] over seeds; training seconds (evaluation excluded).",
        "",
        "| arm | ms per microbatch | accuracy at budget | final accuracy | time to late s |",
        "|---|---:|---:|---:|---:|",
    ]
    for arm in sorted({r["arm"] for r in rows}):
        mine = [r for r in rows if r["arm"] == arm]
        per = [v * 1e3 if (v := per_microbatch(r)) else None for r in mine]
        lines.append(
            f"| {arm} | {spread(per, '.1f')} | {spread([r['at_budget'] for r in mine], '.4f')} | "
            f"{spread([r['final_accuracy'] for r in mine], '.4f')} | "
            f"{spread([r.get('time_to_late') for r in mine])} |"
        )
    return "\n".join(lines)


def _mib(x: Any) -> str:
    v = number(x)
    return f"{v / MiB:.1f}" if v is not None else "-"


def memory_table(memory: Sequence[Row]) -> str:
    lines = [
        "MiB per stage. Resident: what the weight store holds between operations (measured; "
        "the formula of §7.3 beside it); paper: Theorem 1 with the stage's parameters as "
        "Omega/N; transient: plus the largest temporary (unchunked kernels); RSS: the "
        "process's peak over its baseline; cgroup: the emulated host's peak. PD = PipeDream, "
        "mc = mcPipe, gr = GreedyUpdates.",
        "",
        "| configuration | stage | units | params M | m | resident PD (formula) | resident mc "
        "(formula) | PD/mc | paper bound | resident gr | transient PD / mc | RSS delta PD / mc "
        "| cgroup peak PD / mc |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in pairs_of(memory):
        pd, mc, gr = p.get("pipedream") or {}, p.get("mcpipe") or {}, p.get("greedy") or {}
        any_row = pd or mc or gr
        units = any_row.get("units") or []
        span = f"{units[0]}..{units[-1]}" if len(units) > 1 else (units[0] if units else "-")
        params = number(any_row.get("params"))
        lines.append(
            f"| {p['config']} | {p['index']} | {span} ({len(units)}) | "
            f"{params / 1e6 if params else 0:.2f} | {any_row.get('m')} | "
            f"{_mib(pd.get('resident'))} ({_mib(pd.get('formula'))}) | "
            f"{_mib(mc.get('resident'))} ({_mib(mc.get('formula'))}) | "
            f"{fmt(_ratio(pd.get('resident'), mc.get('resident')), '.2f')} | "
            f"{_mib(any_row.get('paper_bound'))} | {_mib(gr.get('resident'))} | "
            f"{_mib(pd.get('transient'))} / {_mib(mc.get('transient'))} | "
            f"{_mib(pd.get('rss_delta'))} / {_mib(mc.get('rss_delta'))} | "
            f"{_mib(pd.get('cgroup_peak'))} / {_mib(mc.get('cgroup_peak'))} |"
        )
    return "\n".join(lines)


def replay_table(rows: Sequence[Row], estimates: Mapping[str, Any]) -> str:
    lines = [
        "| hosts | stage | w_s | replay / rest of compute | w_s/3 | from MACs |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for key, est in sorted(estimates.items()):
        for e in est:
            shares = []
            for r in rows:
                if r["arm"] == "mcpipe" and str(r["topology"]) == key:
                    for st in r["stages"]:
                        if st["index"] == e["stage"]:
                            shares.append(replay_share(st))
            lines.append(
                f"| {key} | {e['stage']} | {e['w']} | {spread(shares)} | {e['spec']:.3f} | "
                f"{e['macs']:.3f} |"
            )
    return "\n".join(lines)


def sections(res: Mapping[str, Any], p: Any) -> list[tuple[str, str]]:
    rows = res.get("accuracy") or []
    out = [("Setup", setup_text(p))]
    out.append(("Regime: the cost model's prediction, made before the runs", regime_table(res, p)))
    if res.get("regime_calibrated"):
        out.append(
            (
                "Cost model calibrated on the pilots",
                "The pilots' stages (mcPipe's for every pipelined arm, Local's for Local) set "
                "the model's compute and replay scales and its CPU per microbatch outside the "
                "compute blocks; data parallelism is not predicted (no pilot measured its "
                "exchange).\n\n" + regime_table(res, p, res["regime_calibrated"]),
            )
        )
    for n in p.topologies:
        out.append(
            (
                f"Fig. {n}: accuracy against training time, {n} hosts",
                accuracy_table(rows, n, res.get("targets") or {}),
            )  # fmt: skip
        )
    for key, *_ in p.extra:
        mine = [r for r in res.get("extra") or [] if r.get("setting") == key]
        if mine:
            out.append((f"Regime map, {key}", extra_table(mine)))
    out.append(("Memory per stage", memory_table(res.get("memory") or [])))
    losses = no_saving(res.get("memory") or [])
    out.append(
        (
            "Where mcPipe does not save memory",
            "\n".join(
                f"- {r['config']}, stage {r['stage']} ({', '.join(r['units'])}): "
                f"{r['ratio']:.2f}x, {r['why']}"
                for r in losses
            )
            or "Every measured stage saves.",
        )
    )
    replays = replay_table(rows, res.get("replay_estimates") or {})
    out.append(("mcPipe's extra compute per stage", replays))
    corr = res.get("correctness") or []
    out.append(
        (
            "Correctness (in one process)",
            "\n".join(
                ["| model | split | e | operations | equal |", "|---|---|---:|---:|---|"]
                + [
                    f"| {r['model']} | {r['split']} | {r['extra']} | {r['operations']} | "
                    f"{'yes' if r['equal'] else '**no**'} |"
                    for r in corr
                ]
            ),
        )
    )
    for name, text in (res.get("testbeds") or {}).items():
        out.append((f"Testbed verification: {name}", text))
    pilot = res.get("pilot") or {}
    out.append(
        (
            "Pilots (seed 0, mcPipe and Local, not reused; the targets: the lower of the two "
            "at a quarter and half of the budget, the late one at least half a point under "
            "the lower plateau)",
            "```\n"
            + json.dumps({k: pilot.get(k) for k in ("seed", "run")}, default=str)
            + "\n"
            + json.dumps(res.get("pilots"), default=str)
            + "\n"
            + json.dumps(res.get("targets"), default=str)
            + "\n```",
        )  # fmt: skip
    )
    return out


def setup_text(p: Any) -> str:
    w = p.accuracy
    where = (
        "local processes (smoke)"
        if p.local
        else "emulated laptops (0.6 core, 2 GiB, 1 Gbit/s Ethernet; cgroup v1 quotas and tbf)"
    )
    data = (
        "digits (1,437 train / 360 test)"
        if w.dataset == "digits"
        else ("the MNIST test set split 8,000 train / 2,000 held out")
    )
    return (
        f"Accuracy: {w.label} on {data}, on {where}; SGD lr {w.lr} without momentum, microbatch "
        f"{w.microbatch} (data parallelism over 3 replicas: 15, the nearest that splits "
        f"evenly), window +0, the same cuts for every pipeline (min-max over multiply-"
        f"accumulates); each run trains until its clock passes {p.budget_s:g} s (pipelines at "
        "the end of that epoch, data-parallel replicas after that step), snapshots every "
        f"{p.snapshot_every} microbatches scored after the run; seeds "
        f"{', '.join(map(str, p.seeds))} (the paper: 10 initialisations), pilot seed "
        f"{p.pilot_seed}. Memory: one seed, 3 m_0 + 10 microbatches per run, a fixed glibc mmap "
        "threshold, chunked unit kernels of 1 MiB (every schedule); VGG16 at 28 -> 32 with 1 "
        "input channel. One thread per process throughout."
    )
