"""Plots of runs: a run's accuracy and loss against training time (what they draw:
:mod:`edgetrain.report.figures`), and runs side by side."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgetrain.report.figures import Series, accuracy_series, loss_series
from edgetrain.report.summary import ACCURACY_PNG, LOSS_PNG, worker_curves
from edgetrain.rundir import COORDINATOR_STEM, RunDir, atomic_write_bytes, read_jsonl, worker_stem

TRAINING_TIME = "training time (s, evaluation excluded)"


def save_figure(fig: Any, path: Path) -> str:
    """Write ``fig`` as a PNG at ``path`` atomically, close it, and return the path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return str(path)


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_series(series: Sequence[Series], path: Path, title: str, ylabel: str) -> str | None:
    """Write a PNG of ``series`` against training time; return its path (None: nothing to
    draw, nothing written)."""
    if not series:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for s in series:
        if s.kind == "star":
            ax.scatter(s.xs, s.ys, marker="*", s=140, color="black", zorder=5, label=s.label)
        else:
            style = "--" if s.kind == "dashed" else "-"
            ax.plot(s.xs, s.ys, linestyle=style, marker="o", ms=3, label=s.label)
    ax.set_xlabel(TRAINING_TIME)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return save_figure(fig, path)


def plot_report(summary: dict[str, Any], run_dir: RunDir) -> tuple[str | None, str | None]:
    """Write the report's ``accuracy.png`` and ``loss.png``; return their paths (None: not
    written, nothing to draw)."""
    coordinator = read_jsonl(run_dir.metrics_file(COORDINATOR_STEM))
    rows = {
        int(w["id"]): read_jsonl(run_dir.metrics_file(worker_stem(int(w["id"]))))
        for w in summary.get("workers", [])
    }
    curves = worker_curves(coordinator, rows)
    name = summary.get("name")
    acc = plot_series(
        accuracy_series(summary, curves),
        run_dir.report / ACCURACY_PNG,
        f"{name}: test accuracy against training time",
        "test accuracy",
    )
    loss = plot_series(
        loss_series(summary, curves),
        run_dir.report / LOSS_PNG,
        f"{name}: loss against training time",
        "loss",
    )
    return acc, loss


def plot_curves(
    runs: Sequence[tuple[str, Sequence[dict[str, Any]]]], path: Path, target: float | None = None
) -> str | None:
    """Overlay each run's accuracy against its training time (evaluation excluded)."""
    plt = pyplot()
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
    ax.set_xlabel(TRAINING_TIME)
    ax.set_ylabel("test accuracy (mean over workers)")
    ax.set_title("accuracy against training time")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return save_figure(fig, path)
