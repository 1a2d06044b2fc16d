"""The DLion reproduction's runs: every arm's recipe from what the pilots fixed (learning
rate, T_bs, targets), batches of arms interleaved on one testbed, and each run read into a row
of the report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from edgetrain.experiment.arms import Arm
from edgetrain.experiment.beds import Bed
from edgetrain.experiment.claims import Row
from edgetrain.experiment.curves import accuracy_at, final_accuracy, time_to
from edgetrain.experiment.runner import Runner, Summary
from reproductions.dlion_plan import ARMS, Plan, recipe, same_bed

PILOT_KEYS = ("arm", "run", "final_accuracy", "train_s", "curve")


def measure(
    summary: Summary,
    arm: str,
    seed: int,
    targets: dict[str, float],
    budget: float | None = None,
) -> Row:
    """One run's figures."""
    own = (summary.get("technique_report") or {}).get("exchange") or {}
    workers: dict[str, dict[str, Any]] = own.get("workers") or {}
    plan = own.get("plan") or {}
    curve = summary.get("curve", [])
    iterations = max((int(w.get("iterations") or 0) for w in workers.values()), default=0)
    train_s = summary.get("train_s")
    lan = sum(int(w.get("bytes_lan") or 0) for w in workers.values())
    wan = sum(int(w.get("bytes_wan") or 0) for w in workers.values())
    samples = int(plan.get("n_train") or 0) * len(curve)  # a global epoch: N samples
    out: Row = {
        "arm": arm,
        "seed": seed,
        "run": summary.get("run"),
        "status": summary.get("status"),
        "train_s": train_s,
        "final_accuracy": final_accuracy(summary),
        "averaged_accuracy": summary.get("averaged_test_accuracy"),
        "first_epoch_accuracy": curve[0].get("test_accuracy") if curve else None,
        "iterations": iterations,
        "iteration_s": train_s / iterations if train_s and iterations else None,
        "samples_per_s": samples / train_s if train_s else None,
        "bytes_lan": lan,
        "bytes_wan": wan,
        "wan_per_iteration": wan / iterations if iterations else None,
        "idle": {w: v.get("idle_fraction") for w, v in workers.items()},
        "batches": {w: v.get("batch_first") for w, v in workers.items()},
        # each worker's process CPU over its steps, per iteration (the cost model's work terms
        # without the quota's stalls)
        "cpu_ms": {w: v.get("cpu_ms_per_iteration") for w, v in workers.items()},
        # what a calibrated cost model reads (reproductions.dlion_calibration)
        "terms": {
            w: {k: v.get(k) for k in ("iterations", "compute_cpu_s", "cpu_s", "computed_samples")}
            for w, v in workers.items()
        },
        "curves": plan.get("curves"),
        "t_unit": plan.get("t_unit"),
        "spread": plan.get("spread"),
        "t_bs": plan.get("t_bs"),
        "site_sender": {w: v.get("site_sender") for w, v in workers.items()},
        "site_receiver": {w: v.get("site_receiver") for w, v in workers.items()},
        "accuracy_at_budget": accuracy_at(summary, budget),
        "budget_s": budget,
        "curve": [[pt.get("train_s"), pt.get("test_accuracy")] for pt in curve],
    }
    for name, target in targets.items():
        out[f"time_to_{name}"] = time_to(summary, target)
    return out


@dataclass
class Batches:
    """DLion's arms, run by ``runner``: the recipe of each from the plan and what the pilots
    fixed, a run name never reused across testbeds."""

    p: Plan
    runner: Runner
    data: dict[str, Any]
    lr: float = 0.02  # every family's eta unless ``lrs`` names its own
    lrs: dict[str, float] = field(default_factory=dict)  # technique -> its tuned eta
    t_bs: int | None = None
    targets: dict[str, float] = field(default_factory=dict)
    beds: dict[str, str] = field(default_factory=dict)  # run name -> the testbed it ran on
    pilot: dict[str, Any] = field(default_factory=dict)  # the report's "pilot"

    def lr_of(self, name: str) -> float:
        """The eta of arm ``name``: its family's (DLion's ablations are DLion's)."""
        return self.lrs.get(ARMS[name][0], self.lr)

    def arm(self, name: str, bed: Bed, tag: str = "", **kw: Any) -> Arm:
        text = recipe(self.p, name, bed, self.data, self.lr_of(name), self.t_bs, **kw)
        run = f"{name}{tag}"
        same_bed(self.beds, run, bed.name)
        return Arm(run, text, label=name)

    def batch(
        self,
        names: Sequence[str],
        bed: Bed,
        group: str,
        seeds: Sequence[int],
        budget: float | None = None,
        tag: str = "",
        **kw: Any,
    ) -> list[Row]:
        """Every arm at every seed, interleaved seed by seed (A, B, A, B)."""

        def row(arm: Arm, seed: int, summary: Summary) -> Row:
            return {**measure(summary, arm.arm, seed, self.targets, budget), "group": group}

        arms = [self.arm(n, bed, tag, **kw) for n in names]
        return self.runner.batch(arms, seeds, bed, row)

    def pilot_rows(self, names: Sequence[str], bed: Bed, tag: str, **kw: Any) -> dict[str, Row]:
        """Runs of ``names`` at the pilot seed (recorded in the report's pilot), each at its
        family's eta (a run name says it: the LR pilot at that eta is the same run): their
        rows, curves included."""
        rows: dict[str, Row] = {}
        for name in names:
            arm = self.arm(name, bed, f"-pilot{tag}-lr{self.lr_of(name):g}", **kw)
            summary = self.runner.summary(arm, self.p.pilot_seed, bed)
            row = measure(summary, name, self.p.pilot_seed, {})
            rows[name] = row
            kept = {k: row[k] for k in PILOT_KEYS} | {"tag": tag, "lr": self.lr_of(name)}
            runs = self.pilot.setdefault("runs", [])
            if kept not in runs:
                runs.append(kept)
        return rows
