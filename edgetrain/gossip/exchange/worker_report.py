"""DLion's, Gaia's and Ako's part of the run report: the plan the run started from (batch
sizes, T_unit, the achieved spread, T_bs) and, per worker, its batch size, idle (waiting)
fraction, iterations and bytes sent per link class (LAN within a site, WAN between sites).
Pure: it reads the workers' ``epoch`` rows."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from edgetrain.gossip.exchange.cpu_parts import PARTS


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _f(x: Any, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def cpu_ms_by_part(parts: Any, cpu_s: Any, iterations: int) -> dict[str, float] | None:
    """A worker's CPU per iteration (ms) part by part (``cpu_parts``: the main thread's,
    cumulative seconds) and ``threads``, the process's CPU in the steps less their sum (the
    transport's and ZeroMQ's threads); None without the figures."""
    total = _num(cpu_s)
    if not isinstance(parts, Mapping) or total is None or iterations <= 0:
        return None
    secs = {str(k): v for k, raw in parts.items() if (v := _num(raw)) is not None}
    out = {k: 1e3 * v / iterations for k, v in sorted(secs.items())}
    out["threads"] = 1e3 * max(0.0, total - sum(secs.values())) / iterations
    return out


def exchange_report(
    manifest: Mapping[str, Any],
    workers: Mapping[int, list[dict[str, Any]]],
    display: str = "Exchange",
) -> dict[str, Any] | None:
    """The section (None when no worker reported an epoch); ``display``: the technique's name
    as its markdown title shows it."""
    plan: dict[str, Any] | None = None
    per: dict[int, dict[str, Any]] = {}
    for wid, rows in sorted(workers.items()):
        epochs = [r for r in rows if r.get("event") == "epoch"]
        if not epochs:
            continue
        for r in epochs:
            if plan is None and isinstance(r.get("plan"), dict):
                plan = r["plan"]
        last = epochs[-1]
        wait = _num(last.get("wait_s")) or 0.0  # cumulative
        train = sum(_num(r.get("epoch_s")) or 0.0 for r in epochs)
        idle = [v for r in epochs if (v := _num(r.get("idle_fraction"))) is not None]
        iterations = int(_num(last.get("iterations")) or 0)
        lan = int(_num(last.get("bytes_lan")) or 0)
        wan = int(_num(last.get("bytes_wan")) or 0)
        per[int(wid)] = {
            "site": last.get("site"),
            "batch_first": epochs[0].get("batch"),
            "batch_last": last.get("batch"),
            "idle_fraction": wait / train if train > 0 else None,
            "idle_by_epoch": idle,
            "iterations": iterations,
            "bytes_lan": lan,
            "bytes_wan": wan,
            "bytes_per_iteration": (lan + wan) / iterations if iterations else None,
            "wan_per_iteration": wan / iterations if iterations else None,
            "compute_s": _num(last.get("compute_s")),
            "compute_cpu_s": _num(last.get("compute_cpu_s")),
            "cpu_s": _num(last.get("cpu_s")),
            "computed_samples": _num(last.get("computed_samples")),
            "cpu_ms_per_iteration": (
                1e3 * cpu / iterations
                if iterations and (cpu := _num(last.get("cpu_s"))) is not None
                else None
            ),
            "cpu_ms_by_part": cpu_ms_by_part(last.get("cpu_parts"), last.get("cpu_s"), iterations),
            "wait_s": _num(last.get("wait_s")),
            "pilot_s": _num(last.get("pilot_s")),
            "dropped_payloads": last.get("dropped_payloads", 0),
            "wait_timeouts": last.get("wait_timeouts", 0),
            **{
                k: last.get(k)
                for k in (
                    "we_sent", "we_received", "we_bytes", "partitions", "deployment",
                    "significant_share", "bandwidth_Bps", "entries", "site_sender",
                    "site_receiver", "forwarded",
                )
                if k in last
            },
        }  # fmt: skip
    if not per:
        return None
    idles = [v["idle_fraction"] for v in per.values() if v["idle_fraction"] is not None]
    wan_it = [v["wan_per_iteration"] for v in per.values() if v["wan_per_iteration"] is not None]
    out: dict[str, Any] = {
        "technique": manifest.get("technique"),
        "plan": plan,
        "workers": per,
        "idle_fraction_max": max(idles) if idles else None,
        "idle_fraction_mean": statistics.fmean(idles) if idles else None,
        "bytes_lan": sum(v["bytes_lan"] for v in per.values()),
        "bytes_wan": sum(v["bytes_wan"] for v in per.values()),
        "wan_bytes_per_iteration": sum(wan_it) if wan_it else None,
    }
    out["markdown"] = _markdown(out, display)
    return out


def _mib(n: Any) -> str:
    return f"{n / 2**20:.2f}" if isinstance(n, (int, float)) else "-"


def _markdown(rep: dict[str, Any], name: str) -> str:
    lines = [f"## {name}: batches, waiting and traffic per worker", ""]
    plan = rep.get("plan") or {}
    if plan:
        lines += [
            f"Plan ({plan.get('rule', '-')}): T_unit {_f(plan.get('t_unit'), '.4f')} s, "
            f"achieved spread {_f(plan.get('spread'), '.1%')} (epsilon "
            f"{_f(plan.get('epsilon'), '.0%')}), total batch {plan.get('total', '-')}, T_bs "
            f"{plan.get('t_bs') if plan.get('t_bs') is not None else '-'}.",
            "",
        ]
    lines += [
        "| worker | site | batch (first, last) | capacity at b0 /s | idle | iterations | "
        "LAN MiB | WAN MiB | KiB / iteration |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    caps = plan.get("capacity_at_b0") or {}
    for w, v in sorted(rep["workers"].items()):
        per_it = v["bytes_per_iteration"]
        lines.append(
            f"| {w} | {v.get('site') or '-'} | {v['batch_first']}, {v['batch_last']} | "
            f"{_f(caps.get(str(w)), '.0f')} | {_f(v['idle_fraction'], '.1%')} | "
            f"{v['iterations']} | {_mib(v['bytes_lan'])} | {_mib(v['bytes_wan'])} | "
            f"{_f(per_it / 1024 if per_it is not None else None, '.1f')} |"
        )
    lines += [
        "",
        "idle: the share of training time the worker waited for its peers' messages. "
        f"WAN bytes per iteration, all workers: {_f(rep['wan_bytes_per_iteration'], '.0f')}.",
    ]
    return "\n".join(lines + _cpu_lines(rep["workers"]))


def _cpu_lines(workers: Mapping[int, Mapping[str, Any]]) -> list[str]:
    """The CPU table: each worker's CPU per iteration, part by part (none: no lines)."""
    by = {w: v["cpu_ms_by_part"] for w, v in sorted(workers.items()) if v.get("cpu_ms_by_part")}
    if not by:
        return []
    order = [p for p in (*PARTS, "threads") if any(p in v for v in by.values())]
    lines = [
        "",
        "CPU per iteration (ms), part by part: the main thread's, and the other threads' "
        "(the transport's); a slow host's iteration is about their sum over its cores.",
        "",
        "| worker | " + " | ".join(order) + " | total |",
        "|---:|" + "---:|" * (len(order) + 1),
    ]
    for w, v in by.items():
        cells = [_f(v.get(p), ".2f") for p in order]
        lines.append(f"| {w} | " + " | ".join(cells) + f" | {_f(sum(v.values()), '.2f')} |")
    return lines
