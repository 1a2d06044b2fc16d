"""EdgeGossip's launcher side: the recipe check that its balancer can run, the balancer as the
run's controller (:mod:`.balancing`), and the report with each worker's r_i, the predictor's
error and the aggregation and ranking overheads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgetrain.comm.control import Controller, Role
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import TechniqueSide


def check(recipe: Recipe) -> None:
    from edgetrain.gossip.balancing import check_recipe

    check_recipe(recipe)


def controller(recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> Controller:
    from edgetrain.gossip.balancing import controller_for

    return controller_for(recipe, roles)


def report(
    manifest: dict[str, Any],
    workers: Mapping[int, list[dict[str, Any]]],
    coordinator: list[dict[str, Any]],
) -> dict[str, Any] | None:
    from edgetrain.gossip.report import gossip_report

    return gossip_report(manifest, workers, edge=True)


SIDE = TechniqueSide(check=check, controller=controller, report=report)
