"""The pipeline family's report: per stage the units held, busy fraction, bubble, bytes sent,
mcPipe's replay time and the five memory figures beside the formulas (and the accelerator's
peaks where a stage computed on CUDA); the accuracy curve the
evaluator scored from snapshots after the run. Pure (reads the metrics rows)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgetrain.pipeline.store_mode import store_mode

MiB = 2**20


def _last(rows: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    row: dict[str, Any]  # (mypy infers Any for reversed() of a list of Any-valued dicts)
    for row in reversed(rows):
        if row.get("event") == kind:
            return row
    return None


def _ratio(a: Any, b: Any) -> float | None:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0:
        return float(a) / float(b)
    return None


def replay_share(timers: Mapping[str, Any]) -> float | None:
    """mcPipe's replay over the rest of a stage's compute, in CPU seconds where the stage
    recorded them (under a CPU quota the quota's waits land in whichever block runs when it is
    spent: replay follows the backward at stage 0, so in wall time it took more than its
    share), else in wall seconds."""
    replay, compute = timers.get("replay_cpu_s"), timers.get("compute_cpu_s")
    if not (isinstance(replay, (int, float)) and isinstance(compute, (int, float))):
        replay, compute = timers.get("replay_s"), timers.get("compute_s")
    return _ratio(replay, (compute or 0) - (replay or 0))


def stage_row(worker: int, row: Mapping[str, Any]) -> dict[str, Any]:
    """One stage's (or replica's) figures from its final (or last epoch) report."""
    t = row.get("timers", {}) or {}
    mem = row.get("memory", {}) or {}
    formulas = row.get("formulas", {}) or {}
    clock = row.get("train_clock_s")
    m = row.get("m")
    warm = m - 1 if isinstance(m, int) else None
    share = replay_share(t)
    expected = (
        warm / 3.0
        if warm is not None and store_mode(str(row.get("technique"))) == "pairs"
        else None
    )
    return {
        "worker": worker,
        "role": row.get("role_name"),
        "index": row.get("role_index"),
        "technique": row.get("technique"),
        "device": row.get("device"),
        "units": row.get("units", []),
        "store_modes": row.get("store_modes", []),
        "m": m,
        "updates": row.get("version"),
        "busy": _ratio(t.get("compute_s"), clock),
        "bubble": _ratio(t.get("wait_s"), clock),
        "bytes_sent": row.get("bytes_sent"),
        "link_sent": (row.get("links") or {}).get("sent", {}),
        "link_arrived": (row.get("links") or {}).get("arrived", {}),
        "send_s": t.get("send_s"),
        "replay_s": t.get("replay_s"),
        "compute_s": t.get("compute_s"),
        "replay_cpu_s": t.get("replay_cpu_s"),
        "compute_cpu_s": t.get("compute_cpu_s"),
        "process_cpu_s": t.get("process_cpu_s"),
        "replay_share": share,
        "replay_expected": expected,
        # replay measured against its estimate (goal: at most 1.1)
        "replay_vs_estimate": _ratio(share, expected) if expected else None,
        "train_clock_s": clock,
        "memory": mem,
        "formulas": formulas,
    }


def snapshot_curve(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The evaluator's scores, in training-time order."""
    final = _last(rows, "final")
    snaps = final.get("snapshots") if final else None
    if not isinstance(snaps, list):
        return []
    keep = (
        "snap", "epoch", "microbatches", "train_s", "epoch_end", "test_accuracy", "test_loss",
        "sha256",
    )  # fmt: skip
    return [{k: s.get(k) for k in keep} for s in snaps if isinstance(s, dict)]


def pipeline_report(
    manifest: Mapping[str, Any], workers: Mapping[int, list[dict[str, Any]]]
) -> dict[str, Any] | None:
    roles = {w["id"]: w.get("role") for w in manifest.get("workers", [])}
    stages = []
    curve: list[dict[str, Any]] = []
    for wid in sorted(workers):
        rows = workers[wid]
        if roles.get(wid) == "evaluator":
            curve = snapshot_curve(rows)
            continue
        row = _last(rows, "final") or _last(rows, "epoch")
        if row is not None and "memory" in row:
            stages.append(stage_row(wid, row))
    if not stages and not curve:
        return None
    epoch_acc = {
        str(s["epoch"]): s["test_accuracy"]
        for s in curve
        if s.get("epoch_end") and s.get("test_accuracy") is not None
    }
    epoch_loss = {
        str(s["epoch"]): s["test_loss"]
        for s in curve
        if s.get("epoch_end") and s.get("test_loss") is not None
    }
    return {
        "stages": stages,
        "snapshots": curve,
        "epoch_accuracy": epoch_acc,
        "epoch_test_loss": epoch_loss,
        "markdown": render(stages, curve),
    }


def _mib(x: Any) -> str:
    return f"{x / MiB:.2f}" if isinstance(x, (int, float)) else "-"


def inbox_rate(arrived: Any) -> float | None:
    """An inbox's rate in bits/s: over the link's busy time when the messages were stamped,
    else over the span of their arrivals."""
    if not isinstance(arrived, dict):
        return None
    for key in ("busy_rate_bps", "rate_bps"):
        rate = arrived.get(key)
        if isinstance(rate, (int, float)) and not isinstance(rate, bool):
            return float(rate)
    return None


def _mbit(arrived: Any) -> str:
    rate = inbox_rate(arrived)
    return f"{rate / 1e6:.1f}" if rate is not None else "-"


def _pct(x: Any) -> str:
    return f"{100 * x:.0f}%" if isinstance(x, (int, float)) else "-"


def accelerator_table(stages: list[dict[str, Any]]) -> list[str]:
    """The accelerator's memory per stage, where stages computed on one (no lines on the CPU)."""
    key = "accelerator_allocated_peak_bytes"
    on = [s for s in stages if isinstance((s.get("memory") or {}).get(key), int)]
    if not on:
        return []
    lines = [
        "",
        "Accelerator memory per stage, MiB (from training's start: the peak tensors held,",
        "max_memory_allocated, and the peak the caching allocator reserved, max_memory_reserved;",
        "on a Jetson the CPU and GPU share one memory, so these overlap the RSS above):",
        "",
        "| stage | device | allocated peak | reserved peak |",
        "|---:|---|---:|---:|",
    ]
    for s in on:
        mem = s["memory"]
        lines.append(
            f"| {s['role']} {s['index']} | {s.get('device') or '-'} | {_mib(mem.get(key))} | "
            f"{_mib(mem.get('accelerator_reserved_peak_bytes'))} |"
        )
    return lines


def render(stages: list[dict[str, Any]], curve: list[dict[str, Any]]) -> str:
    lines = [
        "## Pipeline stages",
        "",
        "| stage | units | store | m | busy | bubble | sent MiB (act / err) | in Mbit/s "
        "(act / err) | replay s | replay/compute (w/3) | replay/estimate |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in stages:
        units = s["units"]
        span = f"{units[0]}..{units[-1]}" if len(units) > 1 else (units[0] if units else "-")
        modes = ",".join(sorted(set(s["store_modes"]))) or "-"
        share = s["replay_share"]
        exp = s["replay_expected"]
        replay = f"{share:.2f} ({exp:.2f})" if share is not None and exp is not None else "-"
        ratio = s.get("replay_vs_estimate")
        vs = f"{ratio:.2f}" if ratio is not None else "-"
        sent, arrived = s.get("link_sent") or {}, s.get("link_arrived") or {}
        links = f"{_mib(sent.get('act'))} / {_mib(sent.get('grad'))}"
        rates = f"{_mbit(arrived.get('act'))} / {_mbit(arrived.get('grad'))}"
        lines.append(
            f"| {s['role']} {s['index']} | {span} ({len(units)}) | {modes} | {s['m'] or '-'} | "
            f"{_pct(s['busy'])} | {_pct(s['bubble'])} | {_mib(s['bytes_sent'])} ({links}) | "
            f"{rates} | {(s['replay_s'] or 0):.2f} | {replay} | {vs} |"
        )
    lines += [
        "",
        "Busy: compute (forward, replay, backward, update) over the training clock; bubble: time",
        "waiting for an activation or error; sent: all bytes, then those to the next stage",
        "(activations) and to the one before (errors); in: what arrived per inbox over the",
        "link's busy time (the union of every message's sent-to-arrived interval, by the hosts'",
        "clocks), the rate the link carried it at.",
        "",
        "Memory per stage, MiB (resident: weights + pairs + optimiser state between operations,",
        "the quantity the paper's theorem bounds; formula: the specification's general bound",
        "for this store; transient: plus the largest temporary; RSS over the process's baseline",
        "after set-up; cgroup: the emulated host's peak):",
        "",
        "| stage | resident | formula | paper bound | transient | activations | RSS delta | "
        "cgroup peak |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in stages:
        mem, f = s["memory"], s["formulas"]
        lines.append(
            f"| {s['role']} {s['index']} | {_mib(mem.get('resident_bytes'))} | "
            f"{_mib(f.get('resident_bytes'))} | {_mib(f.get('paper_bound_bytes'))} | "
            f"{_mib(mem.get('transient_peak_bytes'))} | {_mib(mem.get('activation_peak_bytes'))} | "
            f"{_mib(mem.get('rss_delta_bytes'))} | {_mib(mem.get('cgroup_peak_bytes'))} |"
        )
    lines += accelerator_table(stages)
    if curve:
        lines += [
            "",
            "Accuracy of the snapshots, scored after the run (training time excludes snapshots):",
            "",
            "| microbatches | epoch | train s | test accuracy |",
            "|---:|---:|---:|---:|",
        ]
        for c in curve:
            acc = c.get("test_accuracy")
            shown = f"{acc:.4f}" if isinstance(acc, float) else "-"
            lines.append(
                f"| {c.get('microbatches')} | {c.get('epoch')} | "
                f"{(c.get('train_s') or 0):.1f} | {shown} |"
            )
    return "\n".join(lines)
