"""Local: the whole model on one process, one SGD step per microbatch (the paper's baseline on
one laptop). The same stage executor with one stage and one copy of the weights, so a pipeline
with a window of one reproduces it bit for bit."""

from __future__ import annotations

from edgetrain.errors import RecipeError
from edgetrain.pipeline.family import (
    STAGE,
    check_pipelined,
    check_stage_roles,
)
from edgetrain.pipeline.roles import staged_runner
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import TechniqueSide

STORE = "latest"  # how its stages keep their weights (:mod:`edgetrain.pipeline.stores`)
make_runner = staged_runner


def one_stage(recipe: Recipe) -> None:
    """Local's roles: one stage."""
    check_stage_roles(recipe)
    stages = recipe.role_names().count(STAGE)
    if stages != 1:
        raise RecipeError(
            f"local trains on one process; the recipe has {stages} stages",
            "give one stage worker, or use pipedream, greedy or mcpipe to pipeline",
        )


def check(recipe: Recipe) -> None:
    """The family's check, with one stage."""
    check_pipelined(recipe, one_stage)


SIDE = TechniqueSide(check=check, layout=lambda recipe, slots: [("stage", 1)])
