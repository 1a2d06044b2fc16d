"""Data-parallel: R replicas of the whole model, each on 1/R of every microbatch, gradients
summed over ZeroMQ in replica order (the paper's "data-distributed" baseline); the step is the
same as Local's up to summation order (:mod:`edgetrain.pipeline.replica`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from edgetrain.comm.control import HandIn, Role
from edgetrain.errors import RecipeError
from edgetrain.pipeline.family import (
    REPLICA,
    STAGE,
    PipelineController,
    check_pipelined,
    microbatch_of,
)
from edgetrain.pipeline.roles import replica_runner
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import FinalModel, HandInError, TechniqueSide
from edgetrain.runtime.predict import Prediction, Setting
from edgetrain.runtime.weights import model_arrays, model_sha256

STORE = "latest"  # how its stages keep their weights (:mod:`edgetrain.pipeline.stores`)
make_runner = replica_runner


def replicas_split_the_microbatch(recipe: Recipe) -> None:
    """Data-parallel's roles: replicas, not stages, and a microbatch they split evenly."""
    stages, replicas = recipe.role_names().count(STAGE), recipe.role_names().count(REPLICA)
    if stages or not replicas:
        raise RecipeError(
            "dataparallel trains replicas, not stages",
            'give its [[workers]] role = "replica" (and optionally one "evaluator")',
        )
    b = microbatch_of(recipe)
    if b % replicas:
        raise RecipeError(
            f"the microbatch of {b} does not split evenly over {replicas} replicas",
            "make [pipeline] microbatch (or [train] batch_size) a multiple of the replicas",
        )


def check(recipe: Recipe) -> None:
    """The family's check, with replicas instead of stages."""
    check_pipelined(recipe, replicas_split_the_microbatch)


def check_run_dir(recipe: Recipe, run_dir: Path | None) -> None:
    """Replicas hold the whole model: nothing (no partition plan) is read from the run's
    directory."""
    return None


def reads(recipe: Recipe) -> dict[str, str]:
    """Nothing: a ``[pipeline] plan`` partitions stages, and replicas hold the whole model."""
    return {}


def controller(recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> PipelineController:
    return PipelineController(recipe, roles, run_dir, staged=False)


def final_model(recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]) -> FinalModel:
    """Replica 0's weights, and whether every replica ended with the same."""
    replicas = sorted(i for i in handins if roles[i].name == REPLICA)
    if len(replicas) != sum(r.name == REPLICA for r in roles):
        raise HandInError("a replica did not hand in its weights")
    shas = {model_sha256(model_arrays(handins[i].weights)) for i in replicas}
    weights = model_arrays(handins[replicas[0]].weights)
    return FinalModel(weights, {"replicas": len(replicas), "replicas_equal": len(shas) == 1})


def predict(recipe: Recipe, setting: Setting) -> Prediction:
    """The cost model's data parallelism (:func:`edgetrain.pipeline.predict.predict_dataparallel`)
    over the recipe's replicas."""
    from edgetrain.pipeline.family import shape_of
    from edgetrain.pipeline.predict import predict_dataparallel

    setting = setting.at_batch(microbatch_of(recipe))
    return predict_dataparallel(recipe.train.technique, setting, shape_of(recipe, setting, REPLICA))


def layout(recipe: Recipe, slots: int) -> list[tuple[str, int]]:
    """A replica on as many slots as split the microbatch evenly (at least 2)."""
    batch = microbatch_of(recipe)
    fits = [r for r in range(min(slots, batch), 1, -1) if batch % r == 0]
    if not fits:
        raise ValueError(f"data parallelism needs 2 replicas that split the microbatch of {batch}")
    return [(REPLICA, fits[0])]


def traffic(recipe: Recipe) -> list[tuple[int, int]]:
    """Every pair of replicas (each sends its gradient to every other)."""
    replicas = recipe.ids_of(REPLICA)
    return [(a, b) for i, a in enumerate(replicas) for b in replicas[i + 1 :]]


SIDE = TechniqueSide(
    layout=layout,
    traffic=traffic,
    check=check,
    predict=predict,
    check_run_dir=check_run_dir,
    reads=reads,
    controller=controller,
    final_model=final_model,
)
