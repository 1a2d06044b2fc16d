"""``--plot``: each ranked technique's predicted time per sample, split into its parts."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgetrain.report.plot import pyplot, save_figure

# the bars' parts, in stacking order; what the iteration holds beyond them is "other"
PARTS = ("compute", "exposed_communication", "overhead")


def split(row: Mapping[str, Any]) -> dict[str, float]:
    """One row's microseconds per sample by part (pure): compute, the communication compute
    does not hide, the technique's own overhead, and the rest of the iteration (waiting,
    bubbles, what a part's figure overlaps with another's)."""
    samples = max(1, int(row["samples_per_iteration"]))
    total = float(row["iteration_s"])
    parts = row.get("parts") or {}
    out: dict[str, float] = {}
    left = total
    for name in PARTS:
        v = min(max(0.0, float(parts.get(name, 0.0))), left)
        out[name] = v / samples * 1e6
        left -= v
    out["other"] = max(0.0, left) / samples * 1e6
    return out


def plot_advice(doc: Mapping[str, Any], path: Path) -> str:
    """A horizontal bar per ranked technique, fastest on top."""
    plt = pyplot()
    rows = list(doc.get("ranking") or [])[::-1]
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.5))
    names = [f"{r['technique']}{'' if r['fits'] else ' (does not fit)'}" for r in rows]
    left = [0.0] * len(rows)
    for name in (*PARTS, "other"):
        widths = [split(r)[name] for r in rows]
        ax.barh(names, widths, left=left, label=name.replace("_", " "))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_xlabel("predicted time per sample (us)")
    ax.set_title(f"edgetrain advise: {doc.get('model')} at batch {doc.get('batch_size')}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4, fontsize="small")
    return save_figure(fig, path)
