"""Gantt chart of each strategy's iteration: a communication and a compute lane per strategy."""

from __future__ import annotations

from pathlib import Path

from edgetrain.plan.strategies import StrategyResult

COLOURS = {"pull": "#4c72b0", "push": "#dd8452", "forward": "#55a868", "backward": "#c44e52"}


def plot_gantt(results: dict[str, StrategyResult], path: Path, title: str = "") -> Path:
    """Write a PNG: for every strategy two lanes (comm, compute); backward follows forward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    names = list(results)
    fig, ax = plt.subplots(figsize=(11, 1.0 + 1.1 * len(names)))
    yticks, ylabels = [], []
    for row, name in enumerate(reversed(names)):
        tl = results[name].timeline
        for lane_i, lane in enumerate(("compute", "comm")):
            y = row * 3 + lane_i
            yticks.append(y + 0.4)
            ylabels.append(f"{name} {lane}")
            for span in tl.spans:
                if span.lane != lane:
                    continue
                offset = tl.forward_s if span.phase == "backward" else 0.0
                ax.broken_barh(
                    [(offset + span.start, span.end - span.start)],
                    (y, 0.8),
                    facecolors=COLOURS[span.kind],
                    edgecolors="white",
                    linewidth=0.3,
                )
        ax.axvline(tl.iteration_s, ymin=0, ymax=1, color="grey", lw=0.3)
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels, fontsize=8)
    ax.set_xlabel("seconds (forward, then backward)")
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, list(COLOURS), loc="upper right", fontsize=8, ncol=4)
    ax.set_title(title or "predicted iteration timeline")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path
