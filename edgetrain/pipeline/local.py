"""Local: the whole model on one process, one SGD step per microbatch (the paper's baseline on
one laptop). The same stage executor with one stage and one copy of the weights, so a pipeline
with a window of one reproduces it bit for bit."""

from __future__ import annotations

from edgetrain.errors import RecipeError
from edgetrain.pipeline.family import (
    STAGE,
    check_device_and_evaluator,
    check_stage_roles,
    check_training,
)
from edgetrain.pipeline.roles import runner_for
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import TechniqueSide

STORE = "latest"  # how its stages keep their weights (:mod:`edgetrain.pipeline.stores`)
make_runner = runner_for


def check(recipe: Recipe) -> None:
    """The family's check, with one stage."""
    check_device_and_evaluator(recipe)
    check_stage_roles(recipe)
    stages = recipe.role_names().count(STAGE)
    if stages != 1:
        raise RecipeError(
            f"local trains on one process; the recipe has {stages} stages",
            "give one stage worker, or use pipedream, greedy or mcpipe to pipeline",
        )
    check_training(recipe)


SIDE = TechniqueSide(check=check)
