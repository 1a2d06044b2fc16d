"""The DynaComm report's sections: the setup, the iteration time per setting, the testbeds,
the pilot and the bandwidth trace. Pure."""

from __future__ import annotations

from typing import Any

from edgetrain.experiment.claims import cut, median
from edgetrain.experiment.text import fmt, json_block, spread
from reproductions.dynacomm_claims import seed_figures
from reproductions.dynacomm_measure import failure
from reproductions.dynacomm_plan import PAPER_CUTS, SCHEDULES, Plan


def _num(x: float | None, spec: str = ".3f") -> str:
    return fmt(x, spec)


def _pct(x: float | None) -> str:
    return f"{x:.1f}%" if x is not None else "-"


def sections(results: dict[str, Any], p: Plan) -> list[tuple[str, str]]:
    out = [
        ("Setup", setup_text(p, results)),
        ("Setting map: predicted and measured cut against sequential", setting_map(results)),
        ("Iteration time per setting (median over seeds)", settings_table(results)),
        *[(f"Testbed verification, {k}", v) for k, v in results["testbeds"].items()],
        ("Pilot (seed 0, not reused)", json_block(results["pilot"])),
    ]
    if "trace" in results:
        out.append(("Bandwidth trace (R-DC4)", trace_text(results["trace"])))
    return out


def setting_map(results: dict[str, Any]) -> str:
    """One row per setting: the overlap ceiling, the simulator's cut (DynaComm's predicted
    iteration against sequential's, from each run's own measured costs) and the measured cut
    and its share of the ceiling, median [min, max] over seeds."""
    lines = [
        "| model | hosts | Mbit/s | round trip ms | batch | seeds | ceiling | predicted cut "
        "| measured cut | share of ceiling |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for entry in results["settings"].values():
        s, got = entry["setting"], entry["results"]
        figs = seed_figures(got)
        ceiling = median([r.get("ceiling") for r in got.get("sequential", [])])
        pred = cut(
            median([r.get("predicted_s") for r in got.get("dynacomm", [])]),
            median([r.get("predicted_s") for r in got.get("sequential", [])]),
        )
        cells = [
            s["model"],
            f"{s['trainers']} x {s['core']:g} core",
            str(s["bandwidth_mbit"]),
            f"{s['hold_ms']:g}",
            str(s["batch"]),
            ", ".join(map(str, figs)) or "-",
            _pct(100 * ceiling if ceiling is not None else None),
            _pct(pred),
            spread([f["cut"] for f in figs.values()], ".1f") + ("%" if figs else ""),
            spread([f["share"] for f in figs.values()], ".2f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Every claim above is over seeds at one setting; this map is the settings side by "
        "side. The predicted cut is the simulator's (each run's measured costs, its own cuts); "
        "the ceiling min(C, M)/(C + M) is the most any overlap can save.",
    ]
    return "\n".join(lines)


def settings_table(results: dict[str, Any]) -> str:
    lines = [
        "| model | trainers | Mbit/s | round trip ms | batch | C s | M s | ceiling | sequential s "
        "| lbl | ibatch | dynacomm | dynacomm fwd / bwd | dynacomm predicted / measured s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for entry in results["settings"].values():
        s, got = entry["setting"], entry["results"]
        med = {t: median([r["iteration_s"] for r in got[t]]) for t in SCHEDULES}
        seq, dyn = got["sequential"], got["dynacomm"]
        fwd = cut(median([r["forward_s"] for r in dyn]), median([r["forward_s"] for r in seq]))
        bwd = cut(median([r["backward_s"] for r in dyn]), median([r["backward_s"] for r in seq]))
        pred = median([r["predicted_s"] for r in dyn])
        ceiling = median([r["ceiling"] for r in seq])
        cells = [
            s["model"],
            f"{s['trainers']} x {s['core']:g} core",
            str(s["bandwidth_mbit"]),
            f"{s['hold_ms']:g}",
            str(s["batch"]),
            _num(median([r["compute_s"] for r in seq])),
            _num(median([r["communication_s"] for r in seq])),
            _pct(100 * ceiling if ceiling is not None else None),
            _num(med["sequential"]),
            *[_pct(cut(med[t], med["sequential"])) for t in ("lbl", "ibatch", "dynacomm")],
            f"{_pct(fwd)} / {_pct(bwd)}",
            f"{_num(pred)} / {_num(med['dynacomm'])}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    paper = ", ".join(f"{k} {v:.2f}%" for k, v in PAPER_CUTS.items())
    lines += [
        "",
        "Reductions are against sequential at the same setting; C and M are the sequential run's "
        f"measured compute and communication per iteration. The paper's cuts: {paper}.",
    ]
    return "\n".join(lines)


def trace_text(trace: dict[str, Any]) -> str:
    """R-DC4's arms per seed: training time and the median iteration in each phase of the
    trace; then per epoch of trainer 1 its clock, phase, fitted pull bandwidth, dt and cuts, so
    that a plan following the trace can be seen."""
    ph = trace.get("phases") or {}
    lines = []
    if ph:
        lines += [
            f"Trace: {ph.get('rate')} Mbit/s until {_num(ph.get('drop_at'), '.0f')} s, "
            f"{ph.get('low')} Mbit/s until {_num(ph.get('back_at'), '.0f')} s, then "
            f"{ph.get('rate')} Mbit/s; {ph.get('epochs')} epochs a run.",
            "",
        ]
    plan = trace.get("plan") or {}
    if plan:
        got = plan.get("dynacomm_at_rate") or {}
        lines += [
            f"Both DynaComm arms start from one plan file: {plan.get('model')} at batch "
            f"{plan.get('batch')} profiled on {plan.get('profile_host')}, planned at "
            f"{plan.get('rate_mbit')} Mbit/s with dt {_num(plan.get('dt_s'), '.4f')} s: forward "
            f"cuts {got.get('forward_cuts')}, backward cuts {got.get('backward_cuts')}.",
            "",
        ]
    lines += [
        "| seed | arm | train s | iteration s before / during / after the drop |",
        "|---|---|---:|---:|",
    ]
    seeds = trace.get("seeds") or {}
    for seed, arms in sorted(seeds.items(), key=lambda x: int(x[0])):
        for arm, v in arms.items():
            if v.get("failed"):
                lines.append(f"| {seed} | {arm} | did not complete: {failure(v['failed'])} | - |")
                continue
            p = v.get("phases") or {}
            cells = " / ".join(_num(p.get(k)) for k in ("before", "drop", "after"))
            lines.append(f"| {seed} | {arm} | {_num(v.get('train_s'), '.1f')} | {cells} |")
    lines += [
        "",
        "| seed | arm | epoch | ends at s | phase | pull Mbit/s (fitted) | dt ms | forward cuts "
        "| backward cuts | iteration s |",
        "|---|---|---:|---:|---|---:|---:|---|---|---:|",
    ]
    for seed, arms in sorted(seeds.items(), key=lambda x: int(x[0])):
        for arm, v in arms.items():
            rows = [r for r in v.get("per_epoch") or [] if r.get("worker") == 1] or (
                v.get("per_epoch") or []
            )
            for r in rows:
                bw = r.get("bandwidth_pull_Bps")
                dt = r.get("dt_s")
                lines.append(
                    f"| {seed} | {arm} | {r.get('epoch')} | {_num(r.get('t'), '.1f')} | "
                    f"{r.get('phase') or '-'} | {_num(bw * 8 / 1e6 if bw else None, '.1f')} | "
                    f"{_num(dt * 1000 if dt is not None else None, '.2f')} | "
                    f"{r.get('forward_cuts')} | {r.get('backward_cuts')} | "
                    f"{_num(r.get('iteration_s'))} |"
                )
    return "\n".join(lines)


EMULATED = (
    "the emulated testbed `dynacomm-repro` (3 trainers at 0.45 core, each on its own access "
    "link at the setting's rate, 1 server at 0.45 core on the 1 Gbit/s LAN), on the MNIST test "
    "set split 8,000/2,000"
)


def setup_text(p: Plan, results: dict[str, Any]) -> str:
    where = "local processes on digits (smoke)" if p.local else EMULATED
    bandwidths = ", ".join(f"{b} Mbit/s" for b in p.bandwidths)
    holds = ", ".join(f"{h:g} ms" for h in p.holds)
    return (
        f"Schedules {', '.join(SCHEDULES)} run interleaved at every setting on {where}; models "
        f"{', '.join(p.models)}; bandwidths {bandwidths}; emulated round trips {holds} (a server "
        "holds each reply; this machine's namespaces have no netem); measured seeds "
        f"{', '.join(map(str, p.seeds))}"
        + (
            "; left out: " + ", ".join(f"{m} at {b} Mbit/s" for m, b in sorted(p.skip))
            if p.skip
            else ""
        )
        + ". Each run measures about 30 iterations after its first epoch (the cold start and "
        "first plan, not measured); large batches take several epochs of the 6,400 training "
        "samples, re-planned at every barrier. An epoch's iteration time is the median over the "
        "iterations that ran its final cuts (the first left out); a run's is the median over "
        "trainers and measured epochs. The prediction is the simulator's time for the same "
        "cuts from the same run's measured costs (per-layer compute means over the last "
        "iterations, the link fitted robustly as dt + bytes/bandwidth). Its error is given "
        "with and without the time a shard held a trainer's pulls for the other trainers (BSP "
        "waiting, outside the one-trainer model)."
    )
