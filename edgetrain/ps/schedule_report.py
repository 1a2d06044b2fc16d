"""The parameter-server run's own report: per epoch and trainer, measured against predicted
iteration time, the cuts, the fitted link, the share of communication hidden behind compute;
and a Gantt chart of one measured iteration beside the planned one."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgetrain.rundir import atomic_write_bytes

GANTT_PNG = "gantt.png"
COLOURS = {"pull": "#4c72b0", "push": "#dd8452", "forward": "#55a868", "backward": "#c44e52"}


def _f(x: Any, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "-"


def ps_report(
    manifest: Mapping[str, Any], workers: Mapping[int, list[dict[str, Any]]]
) -> dict[str, Any] | None:
    roles = {w["id"]: w.get("role") for w in manifest.get("workers", [])}
    rows: list[dict[str, Any]] = []
    gantt: dict[str, Any] | None = None
    choices: dict[str, list[int]] = {}  # the plan file line -> trainers that said it
    for wid, events in sorted(workers.items()):
        if roles.get(wid) != "trainer":
            continue
        for e in events:
            if e.get("event") != "epoch" or "iteration_s" not in e:
                continue
            for p in e.get("plans") or []:
                if isinstance(p, dict) and p.get("plan_choice"):
                    choices.setdefault(str(p["plan_choice"]), []).append(wid)
            rows.append(
                {
                    "worker": wid,
                    "epoch": e.get("epoch"),
                    "forward_cuts": e.get("forward_cuts"),
                    "backward_cuts": e.get("backward_cuts"),
                    "iteration_s": e.get("iteration_s"),
                    "iteration_unheld_s": e.get("iteration_unheld_s"),
                    "predicted_s": e.get("predicted_s"),
                    "predicted_now_s": e.get("predicted_now_s"),
                    "prediction_error": e.get("prediction_error"),
                    "dt_s": e.get("dt_s"),
                    "bandwidth_pull_Bps": e.get("bandwidth_pull_Bps"),
                    "bandwidth_push_Bps": e.get("bandwidth_push_Bps"),
                    "hidden_share": e.get("hidden_share"),
                    "buckets": e.get("buckets"),
                    "held_s": e.get("held_s"),
                    "plan_s": e.get("plan_s"),
                    "epoch_s": e.get("epoch_s"),
                    "eval_s": e.get("eval_s"),
                    "t": e.get("t"),  # the epoch event's clock: seconds since the launch
                    "hold_ms": e.get("hold_ms"),
                    "forward_s": e.get("forward_s"),
                    "backward_s": e.get("backward_s"),
                    "predicted_forward_s": e.get("predicted_forward_s"),
                    "predicted_backward_s": e.get("predicted_backward_s"),
                    "costs": e.get("costs"),
                    "iterations": e.get("iterations"),
                    "link_source": e.get("link_source"),
                    "link_note": e.get("link_note"),
                }
            )
            if e.get("gantt"):
                gantt = {
                    "worker": wid,
                    "epoch": e.get("epoch"),
                    "measured": e["gantt"],
                    "planned": e.get("gantt_planned", []),
                }
    if not rows:
        return None
    hold = rows[0].get("hold_ms") or 0
    hold_text = (
        f"Replies are held {hold:g} ms: an **emulated** round trip (`[ps] hold_ms`)."
        if hold
        else "No emulated round trip (`[ps] hold_ms = 0`)."
    )
    lines = ["## Parameter server: measured against predicted", "", hold_text, ""]
    for line, trainers in choices.items():
        lines += [f"{line} (trainer {', '.join(map(str, trainers))}).", ""]
    if any(r["link_source"] not in (None, "fit") for r in rows):
        lines += [
            "link: `fit` is the live fit of `dt + bytes / bandwidth`; where it could not tell "
            "`dt` from the bandwidth (one transfer size seen), a trusted link scaled to the "
            "measured times was used: the trainer's `start probe`, the `plan file`'s link or "
            "the `last fit` (`one size`: none, the cuts were kept).",
            "",
        ]
    lines += [
        "| trainer | epoch | forward cuts | backward cuts | measured s | predicted s | error "
        "| dt ms | pull Mbit/s | push Mbit/s | link | hidden |",
        "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        pull = r["bandwidth_pull_Bps"] * 8 / 1e6 if r["bandwidth_pull_Bps"] else None
        push = r["bandwidth_push_Bps"] * 8 / 1e6 if r["bandwidth_push_Bps"] else None
        dt_ms = r["dt_s"] * 1000 if r["dt_s"] is not None else None
        lines.append(
            f"| {r['worker']} | {r['epoch']} | {_cuts(r['forward_cuts'])} | "
            f"{_cuts(r['backward_cuts'])} | {_f(r['iteration_s'], '.4f')} | "
            f"{_f(r['predicted_s'], '.4f')} | {_f(r['prediction_error'], '+.1%')} | "
            f"{_f(dt_ms, '.2f')} | {_f(pull, '.1f')} | {_f(push, '.1f')} | "
            f"{r['link_source'] or '-'} | {_f(r['hidden_share'], '.0%')} |"
        )
    return {"epochs": rows, "gantt": gantt, "markdown": "\n".join(lines)}


def _cuts(cuts: Any) -> str:
    if not isinstance(cuts, list):
        return "-"
    return (
        "none"
        if not cuts
        else ",".join(str(c) for c in cuts)
        if len(cuts) <= 8
        else f"{len(cuts)} cuts"
    )


def report_files(report_dir: Path, technique_report: Mapping[str, Any]) -> list[str]:
    """The Gantt PNG of one measured iteration (the median of the last epoch) beside the
    simulator's plan of the same cuts."""
    gantt = technique_report.get("gantt")
    if not gantt or not gantt.get("measured"):
        return []
    path = report_dir / GANTT_PNG
    plot_gantt(
        gantt["measured"],
        gantt.get("planned", []),
        path,
        f"trainer {gantt['worker']}, epoch {gantt['epoch']}",
    )
    return [str(path)]


def plot_gantt(
    measured: Sequence[Sequence[Any]], planned: Sequence[Sequence[Any]], path: Path, title: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, ax = plt.subplots(figsize=(11, 2.8), dpi=110)
    lanes = [
        ("planned", "compute", planned),
        ("planned", "comm", planned),
        ("measured", "compute", measured),
        ("measured", "comm", measured),
    ]
    for y, (_which, lane, spans) in enumerate(lanes):
        for s in spans:
            if s[0] != lane:
                continue
            ax.broken_barh(
                [(s[3], max(0.0, s[4] - s[3]))],
                (y, 0.8),
                facecolors=COLOURS.get(s[1], "grey"),
                edgecolors="white",
                linewidth=0.3,
            )
    ax.set_yticks([y + 0.4 for y in range(len(lanes))])
    ax.set_yticklabels([f"{w} {lane}" for w, lane, _ in lanes])
    ax.set_xlabel("seconds from the start of the iteration")
    ax.set_title(f"one iteration, measured against planned ({title})")
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, list(COLOURS), loc="upper right", fontsize=7, ncol=4)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
