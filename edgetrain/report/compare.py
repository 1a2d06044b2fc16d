"""Runs side by side: wall and training time, time to a target accuracy, final accuracy,
iterations, traffic per link class, and the speed-up against the first run.

The first run is the baseline. Its speed-up is 1; another run's is the baseline's time over its
own: time to the target when one is given (both must reach it), else training time. Every
reproduction script compares its arms with this, so the same definitions hold everywhere.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

from edgetrain.report.clock import Point, time_to
from edgetrain.report.summary import build_summary
from edgetrain.rundir import RunDir


def _curve(summary: dict[str, Any]) -> list[Point]:
    return [
        Point(
            p["epoch"],
            p["train_s"],
            p["wall_s"],
            p.get("test_accuracy"),
            p.get("workers", 0),
            p.get("loss"),
            p.get("test_loss"),
        )
        for p in summary.get("curve", [])
    ]


def run_row(summary: dict[str, Any], target: float | None) -> dict[str, Any]:
    """One run's figures for the comparison."""
    curve = _curve(summary)
    reached = time_to(curve, target) if target is not None else None
    last_acc = next((p.accuracy for p in reversed(curve) if p.accuracy is not None), None)
    final = summary.get("test_accuracy")
    return {
        "run": summary.get("run"),
        "run_id": summary.get("run_id"),
        "name": summary.get("name"),
        "family": summary.get("family"),
        "technique": summary.get("technique"),
        "status": summary.get("status"),
        "seed": summary.get("seed"),
        "wall_s": summary.get("wall_s"),
        "train_s": summary.get("train_s"),
        "time_to_target_s": reached.train_s if reached else None,
        "target_epoch": reached.epoch if reached else None,
        "final_accuracy": final if final is not None else last_acc,
        "epochs": curve[-1].epoch if curve else 0,
        "iterations": summary.get("iterations"),
        "bytes_sent": summary.get("bytes_sent"),
        "bytes_by_class": summary.get("bytes_by_class", {}),
        "model_sha256": summary.get("model_sha256"),
        "curve": summary.get("curve", []),
    }


def legend_labels(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Labels that tell the runs apart in a plot's legend: the run directory's name (with the
    run's name first where the directory's does not start with it), the technique and the seed;
    runs whose labels would still be the same get their run id too."""
    labels = []
    for row in rows:
        folder = PurePath(str(row.get("run") or "")).name
        name = str(row.get("name") or "")
        where = folder if folder.startswith(name) else f"{name} ({folder})" if folder else name
        labels.append(
            f"{where}: {row.get('family')}/{row.get('technique')}, seed {row.get('seed')}"
        )
    seen = Counter(labels)
    return [
        f"{label} [{str(row.get('run_id') or '?')[:8]}]" if seen[label] > 1 else label
        for label, row in zip(labels, rows, strict=True)
    ]


def speedups(rows: Sequence[dict[str, Any]], target: float | None) -> list[float | None]:
    """Each run's speed-up against the first (None where a time is missing)."""
    key = "time_to_target_s" if target is not None else "train_s"
    base = rows[0].get(key) if rows else None
    out: list[float | None] = []
    for row in rows:
        mine = row.get(key)
        ok = isinstance(base, (int, float)) and isinstance(mine, (int, float)) and mine > 0
        out.append(base / mine if ok else None)  # type: ignore[operator]
    return out


def compare(runs: Sequence[RunDir], target: float | None = None) -> dict[str, Any]:
    """The comparison of ``runs`` (the first is the baseline), as plain data."""
    rows = [run_row(build_summary(rd), target) for rd in runs]
    for row, s in zip(rows, speedups(rows, target), strict=True):
        row["speedup"] = s
    return {
        "target_accuracy": target,
        "speedup_of": "time_to_target_s" if target is not None else "train_s",
        "baseline": rows[0]["run"] if rows else None,
        "runs": rows,
    }
