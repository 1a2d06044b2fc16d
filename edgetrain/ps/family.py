"""The parameter-server family on the launcher side: placement, the iterations every trainer
runs per epoch, the plan file, the run's model from the shards, the per-epoch plans and report.
These are the defaults of the scheduled techniques (sequential, lbl, ibatch, dynacomm);
Mercury's techniques (every trainer a shard server) override them with their own side,
:mod:`edgetrain.ps.mercury.side`.

Roles: ``server`` shards (hosts labelled ``ps`` first; a lost shard stops the run unless
``[run] restart`` restarts it, rebuilt from the trainers' copies, :mod:`.recovery`) and
``trainer`` (data, epochs; losing one follows
``[run] max_failed_fraction``). Checkpoints are the shards' (weights, optimiser state, version);
BatchNorm statistics stay on the trainers and the run's model takes trainer 0's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.comm.control import Controller, CoordinationPolicy, Decision, Event, HandIn, Role
from edgetrain.errors import RecipeError
from edgetrain.plan.units import parse_bandwidth
from edgetrain.ps.config import PsSection
from edgetrain.ps.plan_entry import choice_line, nearest, plan_entries
from edgetrain.recipe import Recipe
from edgetrain.rundir import read_run_json
from edgetrain.runtime.base import FamilyDefaults, FinalModel, HandInError
from edgetrain.runtime.context import RunRecord
from edgetrain.runtime.predict import Prediction, Setting
from edgetrain.runtime.weights import model_arrays


def iterations_per_epoch(samples: Sequence[int], batch: int) -> int:
    """Full minibatches every trainer can run: the smallest shard's (at least one)."""
    return max(1, min(samples) // batch) if samples else 1


def plan_directive(
    doc: Mapping[str, Any], technique: str, path: str, declared: str | None
) -> dict[str, Any] | None:
    """What trainers get of a plan file: its entries for ``technique``, the one to use when
    ``declared`` (``[ps] plan_bandwidth``) or the file chooses it, and the line that says so
    (``chosen`` None: each trainer measures its link and takes the nearest). None: an entry
    has no such strategy."""
    entries = plan_entries(doc, technique)
    if entries is None:
        return None
    out: dict[str, Any] = {"file": path, "entries": [e.to_dict() for e in entries]}
    if declared is not None:
        rate = parse_bandwidth(declared)
        out["chosen"] = nearest(entries, rate)
        how = f"declared by [ps] plan_bandwidth = {declared!r}"
        out["why"] = choice_line(path, entries, out["chosen"], rate, how)
    elif len(entries) == 1:
        out["chosen"] = 0
        out["why"] = choice_line(path, entries, 0, None, "")
    else:
        out["chosen"] = None  # each trainer measures and says what it took
    return out


class PsController:
    """At start: the iterations per epoch, and the plan file's cuts for every trainer."""

    def __init__(self, recipe: Recipe, roles: Sequence[Role], plan: dict[str, Any] | None):
        self.batch = recipe.train.batch_size
        self.roles = list(roles)
        self.plan = plan

    def on_start(self, ready: Mapping[int, Mapping[str, Any]]) -> Decision:
        samples = [
            int(r.get("samples", 0)) for i, r in ready.items() if self.roles[i].name == "trainer"
        ]
        n = iterations_per_epoch(samples, self.batch)
        return Decision({i: {"iterations": n, "plan": self.plan} for i in ready})

    def on_barrier(self, epoch: int, reports: Mapping[int, Mapping[str, Any]]) -> Decision:
        return Decision()

    def on_drain(self, done: Mapping[int, Mapping[str, Any]]) -> Decision:
        return Decision()


def read_plan(recipe: Recipe, run_dir: Path) -> dict[str, Any] | None:
    """The ``[ps] plan`` file's directive (None without one); one line if it is unusable."""
    cfg = PsSection.of(recipe)
    if cfg.plan is None:
        return None
    fix = "write it with `edgetrain plan ... --run-dir RUN`, launch with --run-dir RUN"
    doc = read_run_json(run_dir, cfg.plan, "[ps] plan", fix)
    plan = plan_directive(doc, recipe.train.technique, cfg.plan, cfg.plan_bandwidth)
    if plan is None:
        raise RecipeError(
            f"[ps] plan: {run_dir / cfg.plan} has no '{recipe.train.technique}' strategy",
            "plan with `edgetrain plan --profile ...` (it writes all four strategies)",
        )
    return plan


class PsFamily(FamilyDefaults):
    """The launcher side of the scheduled parameter-server techniques (the family's
    defaults)."""

    name = "ps"

    def __init__(self) -> None:
        self._plans: dict[int, dict[str, Any]] = {}

    def check(self, recipe: Recipe) -> None:
        roles = recipe.role_names()
        if "server" not in roles or "trainer" not in roles:
            raise RecipeError(
                f"a {recipe.train.technique} run needs at least one server and one trainer",
                'add [[workers]] role = "server" (and trainers) to the recipe',
            )

    def check_run_dir(self, recipe: Recipe, run_dir: Path | None) -> None:
        """A ``[ps] plan`` must be readable and hold the technique before the run starts
        (``run_dir`` None: the launch makes a new directory, which holds no plan)."""
        plan = PsSection.of(recipe).plan
        if plan is None:
            return
        if run_dir is None:
            raise RecipeError(
                f"[ps] plan = {plan!r} is read from the run directory, and this launch would "
                "make a new one",
                "launch with --run-dir RUN, the directory `edgetrain plan` wrote to",
            )
        read_plan(recipe, run_dir)

    def reads(self, recipe: Recipe) -> dict[str, str]:
        plan = PsSection.of(recipe).plan
        return {} if plan is None else {plan: "[ps] plan"}

    def policy(self, recipe: Recipe) -> CoordinationPolicy:
        return CoordinationPolicy(
            epoch_roles=frozenset({"trainer"}),
            barriers=True,
            fatal_roles=frozenset({"server"}),
            checkpoint_roles=frozenset({"server"}),
        )

    def controller(self, recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> Controller:
        return PsController(recipe, roles, read_plan(recipe, run_dir))

    def final_model(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> FinalModel:
        weights: dict[str, np.ndarray] = {}
        shards = [i for i in handins if roles[i].name == "server"]
        if len(shards) != sum(r.name == "server" for r in roles):
            raise HandInError("a parameter server did not hand in its shard")
        for i in sorted(shards):
            weights.update(model_arrays(handins[i].weights))
        first = min((i for i in handins if roles[i].name == "trainer"), default=None)
        if first is not None:  # BatchNorm statistics: trainer 0's
            weights.update(model_arrays(handins[first].weights))
        versions = [int(handins[i].meta.get("version", 0)) for i in shards]
        return FinalModel(weights, {"shards": len(shards), "version": min(versions)})

    def resume(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> dict[int, HandIn]:
        for i in handins:
            if roles[i].name != "server":
                raise HandInError(f"the checkpoint holds worker {i}, which is not a server now")
        return dict(handins)

    def artifacts(self, event: Event) -> dict[str, Any]:
        """``plans/epoch-NNNN.json`` at each epoch: every trainer's cuts, measured and
        predicted iteration time, fitted link and the plan made for the next epoch."""
        if event.kind != "epoch" or "next_cuts" not in event.data or event.worker is None:
            return {}
        epoch = int(event.data.get("epoch", 0))
        entry = {
            k: event.data.get(k)
            for k in (
                "forward_cuts", "backward_cuts", "iteration_s", "predicted_s", "predicted_now_s",
                "prediction_error", "dt_s", "rtt_s", "bandwidth_pull_Bps", "bandwidth_push_Bps",
                "plan_s", "plans", "next_cuts", "hold_ms", "link_source", "link_note",
            )
        }  # fmt: skip
        doc = self._plans.setdefault(epoch, {"epoch": epoch, "trainers": {}})
        doc["trainers"][str(event.worker)] = entry
        return {f"plans/epoch-{epoch:04d}.json": doc}

    def report(self, run: RunRecord) -> dict[str, Any] | None:
        from edgetrain.ps.schedule_report import ps_report

        return ps_report(run.manifest, run.workers)

    def report_files(self, report_dir: Path, technique_report: Mapping[str, Any]) -> list[str]:
        from edgetrain.ps.schedule_report import report_files

        return report_files(report_dir, technique_report)

    def layout(self, recipe: Recipe, slots: int) -> Sequence[tuple[str, int]] | None:
        """One server shard (on a host labelled ``ps`` where there is one) and a trainer on
        every other slot."""
        if slots < 2:
            raise ValueError("a parameter-server run needs 2 workers: a server and a trainer")
        return [("server", 1), ("trainer", slots - 1)]

    def traffic(self, recipe: Recipe) -> Sequence[tuple[int, int]] | None:
        """Each trainer with each server shard (none: Mercury's devices, every pair)."""
        trainers, servers = recipe.ids_of("trainer"), recipe.ids_of("server")
        return [(t, s) for t in trainers for s in servers] or None

    def predict(self, recipe: Recipe, setting: Setting) -> Prediction | None:
        """The scheduled techniques' cost model (:mod:`edgetrain.ps.schedule_cost`)."""
        from dataclasses import replace

        from edgetrain.ps.config import PsSection
        from edgetrain.ps.schedule_cost import predict_schedule

        roles = recipe.role_names()
        trainers = [i for i, r in enumerate(roles) if r == "trainer"]
        servers = [i for i, r in enumerate(roles) if r == "server"]
        hold_s = PsSection.of(recipe).hold_ms / 1000.0  # the emulated round trip, if any
        if hold_s > 0:
            links = tuple(replace(x, latency_s=max(x.latency_s, hold_s / 2)) for x in setting.links)
            setting = replace(setting, links=links)
        return predict_schedule(recipe.train.technique, setting, trainers, servers)


FAMILY = PsFamily()
