"""Summarise a run directory: per-worker results, the averaged model, wall time and traffic."""

from __future__ import annotations

from typing import Any

from edgetrain.rundir import (
    COORDINATOR_STEM,
    RunDir,
    atomic_write_json,
    atomic_write_text,
    read_jsonl,
    worker_stem,
)

SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
ACCURACY_PNG = "accuracy.png"


def _last(events: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    for ev in reversed(events):
        if ev.get("event") == kind:
            return ev
    return None


def _worker_summary(worker: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    final = _last(events, "final")
    last_epoch = _last(events, "epoch")
    src = final or last_epoch or {}
    accuracy = final.get("final_test_accuracy") if final else None
    if accuracy is None:
        evaluated = [e for e in events if e.get("event") == "epoch" and "test_accuracy" in e]
        accuracy = evaluated[-1]["test_accuracy"] if evaluated else None
    return {
        "id": worker["id"],
        "host": worker.get("host", "localhost"),
        "status": worker.get("status", "unknown"),
        "final_test_accuracy": accuracy,
        "epochs": last_epoch.get("epoch", 0) if last_epoch else 0,
        "steps": src.get("steps", 0),
        "bytes_sent": src.get("bytes_sent", 0),
        "bytes_received": src.get("bytes_received", 0),
        "gossip_sent": src.get("gossip_sent", 0),
        "gossip_merged": src.get("gossip_merged", 0),
        "dropped": src.get("dropped", {}),
        "slowdown": worker.get("slowdown", 1.0),
        "exit_code": worker.get("exit_code"),
        "error": worker.get("error"),
    }


def build_summary(run_dir: RunDir) -> dict[str, Any]:
    """Read the manifest and the metrics files into the summary (pure reading, no writing)."""
    manifest = run_dir.read_manifest()
    workers = [
        _worker_summary(w, read_jsonl(run_dir.metrics_file(worker_stem(w["id"]))))
        for w in manifest.get("workers", [])
    ]
    averaged = _last(read_jsonl(run_dir.metrics_file(COORDINATOR_STEM)), "averaged")
    recipe = manifest.get("recipe", {})
    return {
        "run": str(run_dir.path),
        "name": manifest.get("name"),
        "run_id": manifest.get("run_id"),
        "status": manifest.get("status"),
        "error": manifest.get("error"),
        "wall_s": manifest.get("wall_s"),
        "technique": recipe.get("train", {}).get("technique"),
        "algorithm": recipe.get("train", {}).get("algorithm"),
        "model": recipe.get("model", {}).get("name"),
        "dataset": recipe.get("data", {}).get("dataset"),
        "epochs": recipe.get("train", {}).get("epochs"),
        "averaged_test_accuracy": averaged.get("test_accuracy") if averaged else None,
        "bytes_sent": sum(w["bytes_sent"] for w in workers),
        "bytes_received": sum(w["bytes_received"] for w in workers),
        "workers": workers,
    }


def _fmt_acc(x: Any) -> str:
    return f"{x:.4f}" if isinstance(x, (int, float)) else "-"


def human_bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def render_markdown(summary: dict[str, Any]) -> str:
    wall = summary.get("wall_s")
    lines = [
        f"# Run {summary.get('name')} ({summary.get('run_id')})",
        "",
        f"- status: **{summary.get('status')}**"
        + (f" - {summary['error']}" if summary.get("error") else ""),
        f"- {summary.get('technique')}/{summary.get('algorithm')}, model {summary.get('model')}, "
        f"dataset {summary.get('dataset')}, {summary.get('epochs')} epochs",
        f"- wall time: {wall:.1f} s" if isinstance(wall, (int, float)) else "- wall time: -",
        f"- averaged model test accuracy: {_fmt_acc(summary.get('averaged_test_accuracy'))}",
        f"- traffic: {human_bytes(summary.get('bytes_sent'))} sent, "
        f"{human_bytes(summary.get('bytes_received'))} received",
        "",
        "| worker | host | slowdown | status | test accuracy | steps | sent | received |",
        "|---:|---|---:|---|---:|---:|---:|---:|",
    ]
    for w in summary["workers"]:
        lines.append(
            f"| {w['id']} | {w['host']} | {w['slowdown']:g} | {w['status']} | "
            f"{_fmt_acc(w['final_test_accuracy'])} | {w['steps']} | "
            f"{human_bytes(w['bytes_sent'])} | {human_bytes(w['bytes_received'])} |"
        )
    return "\n".join(lines) + "\n"


def write_report(run_dir: RunDir) -> dict[str, Any]:
    """Write ``report/summary.json``, ``summary.md`` and the accuracy plot; return the summary."""
    from edgetrain.report.plot import plot_accuracy

    summary = build_summary(run_dir)
    run_dir.report.mkdir(parents=True, exist_ok=True)
    summary["plot"] = plot_accuracy(run_dir, run_dir.report / ACCURACY_PNG)
    atomic_write_json(run_dir.report / SUMMARY_JSON, summary)
    atomic_write_text(run_dir.report / SUMMARY_MD, render_markdown(summary))
    return summary
