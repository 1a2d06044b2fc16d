"""Plots of runs: test accuracy per worker against wall time, and runs side by side."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgetrain.rundir import COORDINATOR_STEM, RunDir, atomic_write_bytes, read_jsonl, worker_stem

MODEL_EVENTS = ("averaged", "final_model")


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return str(path)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy(run_dir: RunDir, path: Path) -> str | None:
    """Write a PNG of each worker's test accuracy over wall time; return its path (or None)."""
    plt = _pyplot()
    manifest = run_dir.read_manifest()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    plotted = False
    for w in manifest.get("workers", []):
        events = read_jsonl(run_dir.metrics_file(worker_stem(w["id"])))
        pts = [
            (e["t"], e["test_accuracy"])
            for e in events
            if e.get("event") == "epoch" and isinstance(e.get("test_accuracy"), (int, float))
        ]
        if pts:
            xs, ys = zip(*pts, strict=True)
            role = w.get("role", "trainer")
            what = "" if role == "trainer" else f" {role}"
            ax.plot(
                xs,
                ys,
                marker="o",
                ms=3,
                label=f"worker {w['id']}{what} (x{w.get('slowdown', 1):g})",
            )
            plotted = True
    for e in read_jsonl(run_dir.metrics_file(COORDINATOR_STEM)):
        if e.get("event") in MODEL_EVENTS and isinstance(e.get("test_accuracy"), (int, float)):
            label = "averaged model" if e["event"] == "averaged" else "final model"
            ax.scatter(
                [e["t"]],
                [e["test_accuracy"]],
                marker="*",
                s=140,
                color="black",
                zorder=5,
                label=label,
            )
            plotted = True
    if not plotted:
        plt.close(fig)
        return None
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"{manifest.get('name')}: test accuracy per worker")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path)


def plot_curves(
    runs: Sequence[tuple[str, Sequence[dict[str, Any]]]], path: Path, target: float | None = None
) -> str | None:
    """Overlay each run's accuracy against its training time (evaluation excluded)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    plotted = False
    for label, curve in runs:
        pts = [
            (p["train_s"], p["test_accuracy"])
            for p in curve
            if isinstance(p.get("test_accuracy"), (int, float))
        ]
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, marker="o", ms=3, label=label)
            plotted = True
    if not plotted:
        plt.close(fig)
        return None
    if target is not None:
        ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel("training time (s, evaluation excluded)")
    ax.set_ylabel("test accuracy (mean over workers)")
    ax.set_title("accuracy against training time")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path)
