"""What the mcPipe reproduction runs: the memory configurations (a workload, its cuts and its
window), the accuracy workload and budget, the simulator's checks, and the plan per mode. Pure
but for building models on the meta device to cut them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgetrain.experiment import cli
from edgetrain.experiment.pilot import PILOT_SEED
from reproductions.mcpipe_recipes import MLP_DEEP, MLP_WIDE, RunSpec, Workload

TECHNIQUES = ("local", "dataparallel", "pipedream", "greedy", "mcpipe")
PIPELINES = ("pipedream", "greedy", "mcpipe")


@dataclass(frozen=True)
class MemConfig:
    """One memory configuration: a workload cut into ``split`` with window +``extra``."""

    workload: Workload
    split: tuple[int, ...]
    extra: int
    partition: str  # how the cuts were made: "time", "params" or "spec" (§7.5's)
    techniques: tuple[str, ...] = ("pipedream", "mcpipe")

    @property
    def stages(self) -> int:
        return len(self.split)

    @property
    def m0(self) -> int:
        return self.stages + self.extra

    @property
    def key(self) -> str:
        return f"{self.workload.label}-n{self.stages}-{self.partition}-e{self.extra}"

    def run(self, technique: str) -> RunSpec:
        # heartbeats every 5 s: a stage of VGG16 hands in up to 0.5 GB at the end, and a long
        # transfer delays the heartbeats behind it on the host's link
        return RunSpec(
            technique, self.stages, self.extra, self.split, evaluator=False,
            microbatches=3 * self.m0 + 10, epochs=1, memory=True, heartbeat_s=5.0,
        )  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """Everything a reproduction runs."""

    mode: str  # full, quick or smoke
    seeds: tuple[int, ...]
    local: bool  # local processes instead of emulated testbeds
    accuracy: Workload
    budget_s: float
    snapshot_every: int
    topologies: tuple[int, ...]
    techniques: tuple[str, ...]
    memory: tuple[MemConfig, ...]
    sim: tuple[tuple[str, dict[str, Any], tuple[int, ...], int], ...]  # model, options, split, e
    fits: MemConfig | None = None
    link: bool = False
    pilot_seed: int = PILOT_SEED
    # regime first: the headline workload's candidates (the cost model chooses; none: accuracy)
    candidates: tuple[Workload, ...] = ()
    # more settings of the map, measured after the headline: (key, workload (None: the chosen
    # headline workload), hosts, lan, arms measured); on extra_seeds seeds
    extra: tuple[tuple[str, Workload | None, int, str, tuple[str, ...]], ...] = ()
    extra_seeds: int = 3
    greedy_stale: int | None = 2  # GreedyUpdates with this window_extra, beside e = 0

    @property
    def headline_candidates(self) -> tuple[Workload, ...]:
        return self.candidates or (self.accuracy,)


def unit_infos(w: Workload) -> list[Any]:
    """The workload's unit table (built on the meta device)."""
    import torch

    from edgetrain.models import build_model
    from edgetrain.pipeline.chain import build_units
    from edgetrain.pipeline.table import unit_table

    shape = (1, 8, 8) if w.dataset == "digits" else (1, 28, 28)
    with torch.device("meta"):
        model = build_model(w.model, shape, 10, dict(w.options))
    return unit_table(build_units(model, w.model), shape)


def cuts(w: Workload, stages: int, objective: str) -> tuple[int, ...]:
    """Units per stage of the exact min-max partition (PipeDream's costs, so that every
    technique runs the same cuts), with multiply-accumulates standing for time."""
    from edgetrain.pipeline import predict
    from edgetrain.pipeline.partition import partition
    from edgetrain.runtime.predict import Device, Link, Setting

    infos = unit_infos(w)
    setting = Setting(
        tuple(Device(f"stage{s}") for s in range(stages)),
        (Link(1e12),),
        predict.unit_layers(infos, w.microbatch),
    )
    shape = predict.Shape(
        workers=tuple(range(stages)),
        bounds=[(0, len(infos))] * stages,
        microbatch=w.microbatch,
        store=predict.store_of("pipedream"),
    )
    cost = predict.cost_function(setting, shape, objective, infos, links=False)
    part = partition(len(infos), stages, cost)
    return tuple(hi - lo for lo, hi in part.bounds)


def replay_estimates(w: Workload, split: Sequence[int]) -> list[dict[str, Any]]:
    """mcPipe's extra compute per stage (window +0) over PipeDream's: the specification's
    w_s/3, and the same count from the units' multiply-accumulates (a forward, an input error
    (none for the first unit of stage 0) and a weight gradient each cost about one, a replay
    one weight gradient per pending update)."""
    infos = unit_infos(w)
    out, lo = [], 0
    for s, k in enumerate(split):
        part = infos[lo : lo + k]
        lo += k
        pending = len(split) - s - 1
        dw = sum(u.macs for u in part)
        di = sum(u.macs for i, u in enumerate(part) if s > 0 or i > 0)
        base = 2 * dw + di
        macs = pending * dw / base if base else 0.0
        out.append({"stage": s, "w": pending, "spec": pending / 3, "macs": macs})
    return out


# the help of --quick and --smoke (and --testbed)
QUICK_HELP = "two stages on digits, one seed, on the emulated testbed (<10 min)"
SMOKE_HELP = "the test suite's path: local processes, digits, a small MLP (<2 min)"


def plan_for(args: argparse.Namespace, root: Path | None) -> Plan:
    seeds = cli.measured_seeds(args)
    if args.smoke:
        small = Workload("digits", "mlp", {"hidden": [256, 256, 256]})
        return Plan(
            "smoke", (1,), True, small, 1.0, 20, (2,), ("pipedream", "mcpipe"),
            (MemConfig(small, (2, 2), 2, "spec"),),
            (("mlp", {}, (1, 2), 1),),
        )  # fmt: skip
    if args.quick:
        wide = Workload("digits", "mlp", MLP_WIDE)
        return Plan(
            "quick", seeds, False, wide, 20.0, 45, (2,), TECHNIQUES,
            (MemConfig(wide, (2, 2), 2, "spec", (*PIPELINES,)),),
            (("mlp", MLP_WIDE, (2, 2), 0), ("mlp", MLP_WIDE, (2, 2), 2)),
        )  # fmt: skip
    wide = Workload("mnist", "mlp", MLP_WIDE, root=root)
    vgg = Workload("mnist", "vgg16", lr=0.01, root=root)
    memory = [
        MemConfig(wide, split, e, "spec", PIPELINES)
        for split in ((2, 2), (2, 1, 1))
        for e in (0, 1)
    ]
    for n in (2, 3):
        for objective in ("time", "params"):
            memory.append(MemConfig(vgg, cuts(vgg, n, objective), 0, objective))
    fits = MemConfig(vgg, cuts(vgg, 2, "params"), 2, "params")
    memory.append(fits)
    digits_wide = {"hidden": [2048, 2048, 2048]}
    sim = tuple(
        (model, options, split, e)
        for model, options in (("cnn2", {}), ("mlp", digits_wide))
        for split in ((2, 2), (1, 2, 1))
        for e in (0, 1)
    )
    deep = Workload("mnist", "mlp", MLP_DEEP, root=root)
    cnn2 = Workload("mnist", "cnn2", root=root)
    extra = (
        ("slow-link", None, 2, "10mbit", ("pipedream", "mcpipe")),
        ("cnn2", cnn2, 2, "1gbit", ("local", "pipedream", "mcpipe")),
    )
    return Plan(
        "full", seeds, False, wide, 90.0, 125, (2, 3), TECHNIQUES, tuple(memory), sim, fits, True,
        candidates=(wide, deep), extra=extra,
    )  # fmt: skip
