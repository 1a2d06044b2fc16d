"""What the mcPipe reproduction reads from a run's summary: the accuracy curve the evaluator
scored after the run (training clock, accuracy, weights' sha256 per snapshot), times to a
target, the accuracy at a time, and per stage its compute, replay, links and memory. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from edgetrain.experiment.claims import number
from edgetrain.pipeline import stage_report
from edgetrain.pipeline.bounds import FLOAT, paper_bound

Row = dict[str, Any]


def curve(summary: Mapping[str, Any]) -> list[Row]:
    """The scored snapshots in training-time order (train_s, accuracy, microbatches, sha256)."""
    snaps = (summary.get("technique_report") or {}).get("snapshots") or []
    out = [
        {
            "train_s": number(s.get("train_s")),
            "accuracy": number(s.get("test_accuracy")),
            "microbatches": s.get("microbatches"),
            "sha256": s.get("sha256"),
        }
        for s in snaps
        if isinstance(s, dict) and number(s.get("test_accuracy")) is not None
    ]
    return sorted(out, key=lambda p: (p["train_s"] or 0.0, p["microbatches"] or 0))


def time_to(points: Sequence[Row], target: float | None) -> float | None:
    """Training seconds until the accuracy first reaches ``target`` (None: never)."""
    if target is None:
        return None
    for p in points:
        if p["accuracy"] >= target:
            return float(p["train_s"] or 0.0)
    return None


def accuracy_at(points: Sequence[Row], t: float) -> float | None:
    """The accuracy of the last snapshot taken at or before ``t`` training seconds."""
    got = [p["accuracy"] for p in points if (p["train_s"] or 0.0) <= t]
    return got[-1] if got else None


def same_snapshots(a: Sequence[Row], b: Sequence[Row]) -> tuple[int, int]:
    """Of the snapshots both runs took after the same microbatches, how many hold bit-identical
    weights, and how many there are."""
    mine = {p["microbatches"]: p["sha256"] for p in a if p["sha256"]}
    theirs = {p["microbatches"]: p["sha256"] for p in b if p["sha256"]}
    common = sorted(set(mine) & set(theirs))
    return sum(mine[k] == theirs[k] for k in common), len(common)


def replay_share(st: Mapping[str, Any]) -> float | None:
    """A stage row's replay over the rest of its compute: the report's (CPU time where the
    stage measured it), else the report's rule over the row's timers (rows kept from older
    runs)."""
    share = number(st.get("replay_share"))
    return share if share is not None else stage_report.replay_share(st)


def stages(summary: Mapping[str, Any]) -> list[Row]:
    """Per stage (or replica): its figures from the family's report."""
    rows = (summary.get("technique_report") or {}).get("stages") or []
    out = []
    for r in rows:
        if not isinstance(r, dict):
            continue
        mem = r.get("memory") or {}
        f = r.get("formulas") or {}
        m = r.get("m")
        params = f.get("params")
        out.append(
            {
                "index": r.get("index"),
                "role": r.get("role"),
                "technique": r.get("technique"),
                "units": r.get("units") or [],
                "modes": r.get("store_modes") or [],
                "m": m,
                "updates": r.get("updates"),
                "params": params,
                "busy": r.get("busy"),
                "bubble": r.get("bubble"),
                "compute_s": r.get("compute_s"),
                "replay_s": r.get("replay_s"),
                # replay over the rest of the compute, in CPU time where measured
                "replay_share": r.get("replay_share"),
                # CPU seconds since training began: compute blocks (replay in them), replay
                # alone, and the whole process (what the calibrated cost model reads)
                "compute_cpu_s": r.get("compute_cpu_s"),
                "replay_cpu_s": r.get("replay_cpu_s"),
                "process_cpu_s": r.get("process_cpu_s"),
                "train_clock_s": r.get("train_clock_s"),
                "link_sent": r.get("link_sent") or {},
                "link_arrived": r.get("link_arrived") or {},
                "resident": mem.get("resident_bytes"),
                "transient": mem.get("transient_peak_bytes"),
                "activation": mem.get("activation_peak_bytes"),
                "rss_delta": mem.get("rss_delta_bytes"),
                "cgroup_peak": mem.get("cgroup_peak_bytes"),
                "cgroup_limit": mem.get("cgroup_limit_bytes"),
                "formula": f.get("resident_bytes"),
                "pipedream_formula": f.get("pipedream_bytes"),
                "mcpipe_formula": f.get("mcpipe_bytes"),
                "paper_bound": paper_bound(params * 1, 1, m)
                if isinstance(params, int) and isinstance(m, int)
                else None,
                "paper_stash": m * params * FLOAT
                if isinstance(params, int) and isinstance(m, int)
                else None,
            }
        )
    return sorted(out, key=lambda r: r["index"] if isinstance(r["index"], int) else 0)


def accuracy_row(
    summary: Mapping[str, Any],
    arm: str,
    seed: int,
    topology: int,
    targets: Mapping[str, float],
    budget: float,
) -> Row:
    """One accuracy run: times to the targets, accuracy at the budget, the curve."""
    points = curve(summary)
    row: Row = {
        "arm": arm,
        "seed": seed,
        "topology": topology,
        "run": summary.get("run"),
        "status": summary.get("status"),
        "model_sha256": summary.get("model_sha256"),
        "final_accuracy": points[-1]["accuracy"] if points else None,
        "final_train_s": points[-1]["train_s"] if points else None,
        "at_budget": accuracy_at(points, budget),
        "curve": points,
        "stages": stages(summary),
    }
    for name, target in targets.items():
        row[f"time_to_{name}"] = time_to(points, target)
    return row


def link_rate(row: Mapping[str, Any], inbox: str) -> float | None:
    """What arrived on a stage's inbox over the link's busy time, in bits/s."""
    from edgetrain.pipeline.stage_report import inbox_rate

    return inbox_rate((row.get("link_arrived") or {}).get(inbox))
