"""The EdgeGossip reproduction's runs: every arm's recipe (with the predictor's histories when
they were profiled), batches interleaved seed by seed, and each run read into a row of the
report (its times to target include the aggregation before ``start``)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from edgetrain.experiment.arms import Arm
from edgetrain.experiment.beds import Bed
from edgetrain.experiment.claims import Row
from edgetrain.experiment.curves import final_accuracy, time_to
from edgetrain.experiment.runner import Runner, Summary
from reproductions.edgegossip_plan import Plan, recipe


def measure(summary: Summary, arm: str, seed: int, targets: dict[str, float]) -> Row:
    """One run's figures; times to target include the aggregation before ``start``."""
    own = summary.get("technique_report") or {}
    agg = float(own.get("aggregate_max_s") or 0.0)
    out: Row = {
        "arm": arm,
        "seed": seed,
        "run": summary.get("run"),
        "status": summary.get("status"),
        "train_s": summary.get("train_s"),
        "epochs": summary.get("epochs"),
        "aggregate_s": agg,
        "total_s": (summary.get("train_s") or 0.0) + agg,
        "final_accuracy": final_accuracy(summary),
        "averaged_accuracy": summary.get("averaged_test_accuracy"),
        "spread_median": own.get("spread_median"),
        "spreads": [e.get("spread") for e in own.get("epochs", [])],
        "rank_share": own.get("rank_share"),
        "predictor_mape": own.get("predictor_mape"),
        "predictor_mape_by_host": {
            own.get("hosts", {}).get(w, w): v
            for w, v in (own.get("predictor_mape_by_worker") or {}).items()
        },
        "ratios": [e.get("ratio") for e in own.get("epochs", [])],
        "iterations": summary.get("iterations"),
        "bytes_sent": summary.get("bytes_sent"),
    }
    for name, target in targets.items():
        t = time_to(summary, target)
        out[f"time_to_{name}"] = t + agg if t is not None else None
    return out


@dataclass
class Batches:
    """EdgeGossip's arms, run by ``runner`` with the targets the pilot fixed."""

    p: Plan
    runner: Runner
    data: dict[str, Any]
    history: str | None
    targets: dict[str, float] = field(default_factory=dict)

    def arm(self, name: str, bed: Bed, epochs: int, tag: str = "") -> Arm:
        text = recipe(self.p, name, bed, epochs, self.data, self.history)
        return Arm(f"{name}{tag}", text, label=name)

    def row(self, arm: Arm, seed: int, summary: Summary, group: str) -> Row:
        """A run's row: the arm without its tag, its group, its run name."""
        return {**measure(summary, arm.arm, seed, self.targets), "group": group, "name": arm.name}

    def run(
        self,
        arm: Arm,
        seed: int,
        bed: Bed,
        group: str,
        around: AbstractContextManager[Any] | None = None,
    ) -> Row:
        """Run (or find) ``arm`` at ``seed`` inside ``around``; its row, kept."""
        with around or nullcontext():
            summary = self.runner.summary(arm, seed, bed)
        return self.runner.keep(self.row(arm, seed, summary, group))

    def batch(
        self, names: Sequence[str], bed: Bed, epochs: int, group: str, tag: str = ""
    ) -> list[Row]:
        arms = [self.arm(n, bed, epochs, tag) for n in names]
        return self.runner.batch(
            arms, self.p.seeds, bed, lambda arm, seed, s: self.row(arm, seed, s, group)
        )
