"""The launcher side shared by the techniques on the exchange loop (DLion, Gaia, Ako): each
declares its :class:`~edgetrain.runtime.base.TechniqueSide` with :func:`exchange_side`, naming
its section, its title in the report and whether it plans DLion's batches.

Over the family's defaults it adds: the recipe checks that need more than the section (one
line naming the problem and the fix, exit 2, before anything starts), the controller that plans
every worker's batch at start (:mod:`.controller`), ``plans/batches.json`` from the first epoch
report, the report's batches, idle fractions, iterations and bytes per link class
(:mod:`.worker_report`), and the cost model (:mod:`.cost_model`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgetrain.comm.control import Controller, Event, Role
from edgetrain.errors import RecipeError
from edgetrain.gossip.config import DLionSection, ExchangeSection, GaiaSection, GossipSection
from edgetrain.gossip.exchange.controller import ExchangeController
from edgetrain.gossip.exchange.worker_report import exchange_report
from edgetrain.gossip.spread_report import gossip_report
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import TechniqueSide
from edgetrain.runtime.context import RunRecord
from edgetrain.runtime.predict import Prediction, Setting


def batches_file(event: Event) -> dict[str, Any]:
    """``plans/batches.json``: the plan the run started from (batch sizes, T_unit, the achieved
    spread), as the first worker to report an epoch echoed it."""
    plan = event.data.get("plan") if event.kind == "epoch" else None
    return {"plans/batches.json": plan} if isinstance(plan, dict) else {}


def check_recipe(recipe: Recipe, model: type[ExchangeSection]) -> None:
    """The checks of a technique whose own section is ``model``."""
    technique = model.NAME
    cfg = model.of(recipe)
    k = recipe.num_workers
    if recipe.run.restart > 0 and not GossipSection.of(recipe).sync_epochs:
        raise RecipeError(
            f"[run] restart = {recipe.run.restart}: a restarted {technique} worker re-enters at "
            "an epoch barrier, and [gossip] sync_epochs = false has none",
            "set [gossip] sync_epochs = true, or [run] restart = 0",
        )
    if cfg.sites is not None and len(cfg.sites) != k:
        raise RecipeError(
            f"[{technique}] sites names {len(cfg.sites)} sites for {k} workers",
            "give one site name per worker, in worker order",
        )
    distinct = len(set(cfg.sites)) if cfg.sites is not None else None
    if isinstance(cfg, DLionSection):
        b0 = recipe.train.batch_size
        if cfg.t_bs is not None and cfg.t_bs < k * b0:
            raise RecipeError(
                f"[dlion] t_bs = {cfg.t_bs} is below the starting total batch, {k} workers x "
                f"batch_size {b0} = {k * b0}",
                "raise t_bs, or lower [train] batch_size",
            )
        if cfg.selective and distinct == 1:
            raise RecipeError(
                "[dlion] selective = true chooses sender and receiver sites, but sites names "
                "only one",
                "name at least two sites, or set selective = false",
            )
    if isinstance(cfg, GaiaSection) and cfg.deployment == "site" and distinct == 1:
        raise RecipeError(
            "[gaia] deployment = 'site' exchanges between the sites' parameter servers, but "
            "sites names only one",
            "name at least two sites, or use deployment = 'worker' or 'auto'",
        )


def exchange_side(
    model: type[ExchangeSection], display: str, *, plans_batches: bool = False
) -> TechniqueSide:
    """The side of an exchange technique whose own section is ``model``, titled ``display`` in
    the report; ``plans_batches``: the controller plans DLion's capacity-aware batches from
    its section (else b0 each)."""

    def check(recipe: Recipe) -> None:
        check_recipe(recipe, model)

    def controller(recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> Controller:
        dlion = DLionSection.of(recipe) if plans_batches else None
        return ExchangeController(recipe, roles, dlion)

    def report(run: RunRecord) -> dict[str, Any] | None:
        out = gossip_report(run.manifest, run.workers)
        if out is not None:
            own = exchange_report(run.manifest, run.workers, display)
            if own is not None:
                out["markdown"] = f"{out['markdown']}\n\n{own.pop('markdown')}"
                out["exchange"] = own
        return out

    def predict(recipe: Recipe, setting: Setting) -> Prediction | None:
        from edgetrain.gossip.exchange.cost_model import predict_recipe

        return predict_recipe(recipe, setting, model)

    return TechniqueSide(
        check=check,
        controller=controller,
        artifacts=batches_file,
        report=report,
        predict=predict,
    )
