"""Plot test accuracy against wall time for each worker of a run."""

from __future__ import annotations

import io

from edgetrain.rundir import COORDINATOR_STEM, RunDir, atomic_write_bytes, read_jsonl, worker_stem


def plot_accuracy(run_dir: RunDir, path: object) -> str | None:
    """Write a PNG of each worker's test accuracy over wall time; return its path (or None)."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    manifest = run_dir.read_manifest()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    plotted = False
    for w in manifest.get("workers", []):
        events = read_jsonl(run_dir.metrics_file(worker_stem(w["id"])))
        pts = [
            (e["t"], e["test_accuracy"])
            for e in events
            if e.get("event") == "epoch" and "test_accuracy" in e
        ]
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, marker="o", ms=3, label=f"worker {w['id']} (x{w.get('slowdown', 1):g})")
            plotted = True
    for e in read_jsonl(run_dir.metrics_file(COORDINATOR_STEM)):
        if e.get("event") == "averaged":
            ax.scatter(
                [e["t"]],
                [e["test_accuracy"]],
                marker="*",
                s=140,
                color="black",
                zorder=5,
                label="averaged model",
            )
            plotted = True
    plt_path = Path(str(path))
    if not plotted:
        plt.close(fig)
        return None
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"{manifest.get('name')}: test accuracy per worker")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(plt_path, buf.getvalue())
    return str(plt_path)
