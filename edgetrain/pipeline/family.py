"""The pipeline family on the launcher side: roles, the partition, drain accounting for the
evaluator, the run's model from the stage slices, resume, memory files and the report.

Roles: ``stage`` (Local and the pipeline schedules: stage s holds a contiguous run of units),
``replica`` (data parallelism: a whole model on a slice of every microbatch) and an optional
``evaluator`` that scores the stages' snapshots after the run. Every role is one the run cannot
lose: a pipeline without one of its stages, or a replica that stops reducing, cannot go on, and
a run without its evaluator would lose its accuracy curve. No role trains on a shard: stage 0
(or every replica) draws the same seeded microbatches from the whole training split, and the
labels travel with the activations to the last stage.

The partition comes from a plan file (``[pipeline] plan``), an explicit ``split``, or the exact
min-max partitioner at launch (``objective``), and reaches every process in its ``start``
directive with the number of microbatches per epoch. With a time budget (``[pipeline]
budget_s``) the barrier after the epoch that passes it tells every process to stop there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgetrain.comm.control import Controller, CoordinationPolicy, Decision, Event, HandIn, Role
from edgetrain.errors import RecipeError
from edgetrain.pipeline import feed
from edgetrain.pipeline.config import PipelineSection
from edgetrain.pipeline.store_mode import store_mode
from edgetrain.recipe import Recipe
from edgetrain.rundir import read_run_json
from edgetrain.runtime.base import FamilyDefaults, FinalModel, HandInError, WireLoad
from edgetrain.runtime.context import RunRecord
from edgetrain.runtime.predict import Prediction, Setting
from edgetrain.runtime.weights import model_arrays

STAGE = "stage"
REPLICA = "replica"
EVALUATOR = "evaluator"


def microbatch_of(recipe: Recipe) -> int:
    cfg = PipelineSection.of(recipe)
    return cfg.microbatch or recipe.train.batch_size


def _count(recipe: Recipe, role: str) -> int:
    return recipe.role_names().count(role)


def check_device_and_evaluator(recipe: Recipe) -> None:
    """The first checks every pipeline technique makes: at most one evaluator. Any ``[train]
    device`` trains (each process computes on it; CUDA where there is none is refused as in
    every family, by the launch and by the process that would start it)."""
    evaluators = _count(recipe, EVALUATOR)
    if evaluators > 1:
        raise RecipeError(
            f"a {recipe.train.technique} run has at most one evaluator (the recipe has "
            f"{evaluators})",
            'keep one [[workers]] role = "evaluator" with count = 1',
        )


def check_stage_roles(recipe: Recipe) -> None:
    """A pipelined technique trains stages."""
    if not _count(recipe, STAGE):
        raise RecipeError(
            f"a {recipe.train.technique} run needs stage workers",
            'add [[workers]] with role = "stage"',
        )


def check_training(recipe: Recipe) -> None:
    """The last checks every pipeline technique makes: the optimiser, the split, snapshots and
    the model."""
    stages, evaluators = _count(recipe, STAGE), _count(recipe, EVALUATOR)
    cfg = PipelineSection.of(recipe)
    if recipe.train.optimizer != "sgd":
        raise RecipeError(
            f"the pipeline family steps with SGD, not {recipe.train.optimizer}",
            "set [train] optimizer = 'sgd' (momentum and weight_decay are allowed)",
        )
    if cfg.split is not None and len(cfg.split) != stages:
        raise RecipeError(
            f"[pipeline] split has {len(cfg.split)} entries for {stages} stage workers",
            "give one unit count per stage",
        )
    if cfg.replay == "lowrank" and store_mode(recipe.train.technique) != "pairs":
        raise RecipeError(
            f"[pipeline] replay = 'lowrank' replays stored pairs (mcPipe's), which "
            f"{recipe.train.technique} does not keep",
            "remove replay from [pipeline], or set [train] technique = 'mcpipe'",
        )
    if cfg.replay == "lowrank" and (recipe.train.momentum or recipe.train.weight_decay):
        raise RecipeError(
            "[pipeline] replay = 'lowrank' needs plain SGD (momentum and weight decay make "
            "the pending updates full rank)",
            "set [train] momentum = 0 and weight_decay = 0, or replay = 'sequential'",
        )
    if cfg.snapshot_every and not evaluators:
        raise RecipeError(
            "[pipeline] snapshot_every needs an evaluator to send the snapshots to",
            'add [[workers]] role = "evaluator", or set snapshot_every = 0',
        )
    _check_model(recipe)


def check_pipelined(recipe: Recipe, roles: Callable[[Recipe], None] | None = None) -> None:
    """What the schema cannot see: the evaluator, then ``roles`` (the family's
    default: stages), then the optimiser, the split, snapshots and the model."""
    check_device_and_evaluator(recipe)
    (roles or check_stage_roles)(recipe)
    check_training(recipe)


def _guess_shape(recipe: Recipe) -> tuple[int, int, int]:
    d = recipe.data
    if d.dataset == "digits":
        return (1, 8, 8)
    if d.dataset == "cifar10":
        return (3, 32, 32)
    if d.dataset == "synthetic":
        s = (1,) * (3 - len(d.shape)) + tuple(d.shape)
        return (s[0], s[1], s[2])
    return (1, 28, 28)


def _check_model(recipe: Recipe) -> None:
    """Refuse a model that is not a chain, in one line, before anything starts."""
    import torch

    from edgetrain.errors import ModelError
    from edgetrain.models import build_model
    from edgetrain.pipeline.chain import build_units

    try:
        with torch.device("meta"):
            model = build_model(recipe.model.name, _guess_shape(recipe), 10, recipe.model.options)
        units = build_units(model, recipe.model.name)
    except ModelError as exc:
        raise RecipeError(f"[model] {exc}") from None
    stages = _count(recipe, STAGE)
    if stages > len(units):
        raise RecipeError(
            f"{stages} stages cannot share the {len(units)} units of {recipe.model.name}",
            "use fewer stage workers",
        )
    cfg = PipelineSection.of(recipe)
    if cfg.split is not None and sum(cfg.split) != len(units):
        raise RecipeError(
            f"[pipeline] split covers {sum(cfg.split)} units; {recipe.model.name} has {len(units)}",
            "make the counts add up to the model's units (see `edgetrain plan --pipeline`)",
        )


# ------------------------------------------------------------------ partition


def model_table(recipe: Recipe) -> tuple[Any, tuple[int, int, int], int]:
    """The unit table of the recipe's model (built on the meta device), the input shape and
    the training samples."""
    import torch

    from edgetrain.models import build_model
    from edgetrain.pipeline.chain import build_units
    from edgetrain.pipeline.table import unit_table
    from edgetrain.runtime.setup import load_run_data

    data = load_run_data(recipe)
    with torch.device("meta"):
        model = build_model(recipe.model.name, data.input_shape, data.classes, recipe.model.options)
    infos = unit_table(build_units(model, recipe.model.name), data.input_shape)
    return infos, data.input_shape, len(data.x_train)


def launch_partition(recipe: Recipe, infos: Any, stages: int) -> Any:
    """The partition the launch makes without a plan or a split: the cost model's
    (:func:`~edgetrain.pipeline.predict.choose`) under ``[pipeline] objective`` with
    multiply-accumulates standing for time (no profile, no device speeds or memory caps)."""
    from edgetrain.pipeline.predict import Shape, choose, store_of, unit_layers
    from edgetrain.runtime.predict import Device, Link
    from edgetrain.runtime.setting_build import LOOPBACK_BPS

    cfg = PipelineSection.of(recipe)
    b = microbatch_of(recipe)
    devices = tuple(Device(f"stage{s}") for s in range(stages))
    setting = Setting(devices, (Link(LOOPBACK_BPS),), unit_layers(infos, b))
    shape = Shape(
        workers=tuple(range(stages)),
        bounds=[(0, len(infos))] * stages,
        microbatch=b,
        store=store_of(recipe.train.technique, cfg.store),
        extra=cfg.window_extra,
        uniform=cfg.window,
        momentum=recipe.train.momentum > 0,
        pair_elems=tuple(u.pair_elems for u in infos),
    )
    return choose(setting, shape, cfg.objective, infos, links=False)


def choose_bounds(recipe: Recipe, run_dir: Path) -> tuple[list[tuple[int, int]], dict[str, Any]]:
    """The stages' units and where they came from (plan file, split or the partitioner)."""
    from edgetrain.pipeline.partition import PartitionError, bounds_of
    from edgetrain.pipeline.partition_file import bounds_from_plan

    cfg = PipelineSection.of(recipe)
    n = _count(recipe, STAGE)
    infos, _, _ = model_table(recipe)
    if cfg.plan is not None:
        path = run_dir / cfg.plan
        fix = (
            "write it with `edgetrain plan --pipeline ... --run-dir RUN`, launch with --run-dir RUN"
        )
        doc = read_run_json(run_dir, cfg.plan, "[pipeline] plan", fix)
        bounds = bounds_from_plan(doc, [u.name for u in infos], n, str(path))
        return bounds, {"source": "plan", "plan": cfg.plan, "objective": doc.get("objective")}
    if cfg.split is not None:
        return list(bounds_of(list(cfg.split))), {"source": "split"}
    try:
        part = launch_partition(recipe, infos, n)
    except PartitionError as exc:
        raise RecipeError(f"[pipeline] {exc}") from None
    return list(part.bounds), {"source": "partitioner", "objective": cfg.objective}


def stop_after(budget: float | None, reports: Iterable[Mapping[str, Any]]) -> bool:
    """Has the slowest training clock of an epoch's reports passed the budget? Pure."""
    if budget is None:
        return False
    clocks = [r.get("train_clock_s") for r in reports]
    seen = [float(c) for c in clocks if isinstance(c, (int, float)) and not isinstance(c, bool)]
    return bool(seen) and max(seen) >= budget


class PipelineController:
    """At start: the partition and the microbatches per epoch; at drain: how many snapshot
    parts the evaluator must wait for."""

    def __init__(
        self, recipe: Recipe, roles: Sequence[Role], run_dir: Path, *, staged: bool = True
    ) -> None:
        """``staged``: the run trains stages that share the model's units (False: replicas of
        the whole model, no partition)."""
        self.roles = list(roles)
        cfg = PipelineSection.of(recipe)
        self.cap = cfg.microbatches
        self.budget = cfg.budget_s
        self.microbatch = microbatch_of(recipe)
        self.bounds: list[tuple[int, int]] = []
        self.partition: dict[str, Any] = {"source": "replicas"}
        if staged:
            self.bounds, self.partition = choose_bounds(recipe, run_dir)

    def on_start(self, ready: Mapping[int, Mapping[str, Any]]) -> Decision:
        samples = [int(r.get("samples", 0) or 0) for r in ready.values() if r.get("samples")]
        m = feed.per_epoch(min(samples) if samples else 0, self.microbatch, self.cap)
        if m < 1:
            return Decision(
                halt=f"the training split holds fewer samples than one microbatch of "
                f"{self.microbatch}"
            )
        directive = {
            "bounds": [list(b) for b in self.bounds],
            "microbatches": m,
            "partition": self.partition,
        }
        return Decision({i: dict(directive) for i in ready})

    def on_barrier(self, epoch: int, reports: Mapping[int, Mapping[str, Any]]) -> Decision:
        """Past the time budget: every training process stops after this epoch."""
        if stop_after(self.budget, reports.values()):
            return Decision({i: {"stop": True} for i in reports})
        return Decision()

    def on_drain(self, done: Mapping[int, Mapping[str, Any]]) -> Decision:
        expect: dict[str, int] = {}
        for i, report in done.items():
            n = report.get("snapshot_parts", 0)
            if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                expect[str(i)] = n
        out = {i: {"expect": expect} for i, r in enumerate(self.roles) if r.name == EVALUATOR}
        return Decision(out)


class PipelineFamily(FamilyDefaults):
    """The launcher side of the pipelined techniques (the family's defaults); data-parallel
    replicas override it (:mod:`edgetrain.pipeline.dataparallel`)."""

    name = "pipeline"

    def check(self, recipe: Recipe) -> None:
        check_pipelined(recipe)

    def layout(self, recipe: Recipe, slots: int) -> Sequence[tuple[str, int]] | None:
        """A stage on every slot (no evaluator: it scores outside the training clock)."""
        if slots < 2:
            raise ValueError("a pipeline needs at least 2 stages")
        return [(STAGE, slots)]

    def traffic(self, recipe: Recipe) -> Sequence[tuple[int, int]] | None:
        """Each stage with the next (activations one way, errors back)."""
        stages = recipe.ids_of(STAGE)
        return list(zip(stages, stages[1:], strict=False))

    def check_run_dir(self, recipe: Recipe, run_dir: Path | None) -> None:
        """A ``[pipeline] plan`` must be readable and fit the model before the run starts
        (``run_dir`` None: the launch makes a new directory, which holds no plan)."""
        cfg = PipelineSection.of(recipe)
        if cfg.plan is None:
            return
        if run_dir is None:
            raise RecipeError(
                f"[pipeline] plan = {cfg.plan!r} is read from the run directory, and this "
                "launch would make a new one",
                "launch with --run-dir RUN, the directory `edgetrain plan --pipeline` wrote to",
            )
        choose_bounds(recipe, run_dir)

    def wire_load(self, recipe: Recipe, data_bytes: int) -> WireLoad:
        """Activations and errors travel per microbatch."""
        return WireLoad(max(recipe.train.batch_size, microbatch_of(recipe)))

    def reads(self, recipe: Recipe) -> dict[str, str]:
        plan = PipelineSection.of(recipe).plan
        return {} if plan is None else {plan: "[pipeline] plan"}

    def policy(self, recipe: Recipe) -> CoordinationPolicy:
        return CoordinationPolicy(
            epoch_roles=frozenset({STAGE, REPLICA}),
            barriers=True,
            fatal_roles=frozenset({STAGE, REPLICA, EVALUATOR}),
            checkpoint_roles=frozenset({STAGE, REPLICA}),
            rewinds=True,
        )

    def controller(self, recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> Controller:
        return PipelineController(recipe, roles, run_dir)

    def artifacts(self, event: Event) -> dict[str, Any]:
        """``metrics/pipeline-memory-stage<s>.json`` (or ``-replica<r>``) from each final report:
        the five memory figures (and the accelerator's, on CUDA) with the formulas beside them."""
        if event.kind != "final" or not isinstance(event.data.get("memory"), dict):
            return {}
        role = event.data.get("role_name")
        index = event.data.get("role_index")
        if role not in (STAGE, REPLICA) or not isinstance(index, int):
            return {}
        doc = {
            "worker": event.worker,
            "role": role,
            "index": index,
            "technique": event.data.get("technique"),
            "device": event.data.get("device"),
            "memory": event.data["memory"],
            "formulas": event.data.get("formulas"),
            "units": event.data.get("units"),
            "store_modes": event.data.get("store_modes"),
        }
        return {f"metrics/pipeline-memory-{role}{index}.json": doc}

    def final_model(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> FinalModel:
        stages = sorted((roles[i].index, i) for i in handins if roles[i].name == STAGE)
        if len(stages) != sum(r.name == STAGE for r in roles):
            raise HandInError("a stage did not hand in its weights")
        joined: dict[str, Any] = {}
        for s, i in stages:
            part = model_arrays(handins[i].weights)
            overlap = set(part) & set(joined)
            if overlap:
                raise HandInError(f"stage {s} handed in {sorted(overlap)[0]}, another stage's")
            joined.update(part)
        versions = [handins[i].meta.get("version") for _, i in stages]
        return FinalModel(joined, {"stages": len(stages), "versions": versions})

    def resume(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> dict[int, HandIn]:
        for i in handins:
            if i >= len(roles) or roles[i].name not in (STAGE, REPLICA):
                raise HandInError(f"the checkpoint holds worker {i}, which is not a stage now")
            if handins[i].meta.get("role") != str(roles[i]):
                raise HandInError(
                    f"the checkpoint's worker {i} was {handins[i].meta.get('role')}, "
                    f"now it is {roles[i]}"
                )
        return dict(handins)

    def report(self, run: RunRecord) -> dict[str, Any] | None:
        from edgetrain.pipeline.stage_report import pipeline_report

        return pipeline_report(run.manifest, run.workers)

    def predict(self, recipe: Recipe, setting: Setting) -> Prediction | None:
        """The family's cost model (:mod:`edgetrain.pipeline.predict`) on the recipe's stages,
        its ``split`` or else the min-max partition under the model's own stage times (a plan
        file lives in a run directory the setting does not name)."""
        from edgetrain.pipeline.predict import predict_pipelined

        setting = setting.at_batch(microbatch_of(recipe))
        return predict_pipelined(recipe.train.technique, setting, shape_of(recipe, setting, STAGE))

    def planned(self, recipe: Recipe, setting: Setting) -> dict[str, dict[str, Any]] | None:
        """The cuts the cost model chose on ``setting`` (``[pipeline] split``) where the recipe
        has two stages or more and fixes none (no split, no plan file): a launch without them
        cuts by multiply-accumulates on equal devices (:func:`launch_partition`), and on hosts
        of unequal speed or behind slow links that is another pipeline than the one predicted."""
        cfg = PipelineSection.of(recipe)
        if _count(recipe, STAGE) < 2 or cfg.split is not None or cfg.plan is not None:
            return None
        shape = shape_of(recipe, setting.at_batch(microbatch_of(recipe)), STAGE)
        return {"pipeline": {"split": [hi - lo for lo, hi in shape.bounds]}}


def shape_of(recipe: Recipe, setting: Setting, role: str) -> Any:
    """The cost model's :class:`~edgetrain.pipeline.predict.Shape` of ``recipe``: its ``role``
    workers (stages, or replicas of the whole model), the technique's weight store and
    window, and the stages' units."""
    from edgetrain.pipeline.lowrank import unit_factors
    from edgetrain.pipeline.partition import bounds_of
    from edgetrain.pipeline.predict import Shape, min_max_bounds, store_of

    cfg = PipelineSection.of(recipe)
    workers = [i for i, r in enumerate(recipe.role_names()) if r == role]
    infos = _unit_infos(recipe, [x.name for x in setting.layers])
    shape = Shape(
        workers=workers,
        bounds=[(0, len(setting.layers))],
        microbatch=microbatch_of(recipe),
        store=store_of(recipe.train.technique, cfg.store),
        extra=cfg.window_extra,
        uniform=cfg.window,
        microbatches=cfg.microbatches,
        momentum=recipe.train.momentum > 0,
        snapshot_every=cfg.snapshot_every,
        pair_elems=tuple(u.pair_elems for u in infos) if infos is not None else None,
        replay_factor=(
            unit_factors(microbatch_of(recipe), infos)
            if infos is not None and cfg.replay == "lowrank"
            else None
        ),
    )
    if role != STAGE:
        return shape
    if cfg.split is not None:
        bounds = list(bounds_of(list(cfg.split)))
    else:
        bounds = min_max_bounds(setting, shape)
    return replace(shape, bounds=bounds)


def _unit_infos(recipe: Recipe, names: Sequence[str]) -> list[Any] | None:
    """The recipe's unit table (built on the meta device), as ``plan --pipeline`` reads it;
    None where the setting's layers are not the model's units (a model cut at block
    granularity, another model)."""
    import torch

    from edgetrain.errors import ModelError
    from edgetrain.models import build_model
    from edgetrain.pipeline.chain import build_units
    from edgetrain.pipeline.table import unit_table

    shape = _guess_shape(recipe)
    try:
        with torch.device("meta"):
            model = build_model(recipe.model.name, shape, 10, recipe.model.options)
        infos = unit_table(build_units(model, recipe.model.name), shape)
    except ModelError:
        return None
    if [u.name for u in infos] != list(names):
        return None
    return infos


FAMILY = PipelineFamily()
