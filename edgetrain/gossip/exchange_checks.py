"""Recipe checks of DLion, Gaia and Ako that need more than their own section: one line naming
the problem and the fix (exit 2), before anything starts."""

from __future__ import annotations

from edgetrain.errors import RecipeError
from edgetrain.gossip.config import DLionSection, ExchangeSection, GaiaSection
from edgetrain.recipe import Recipe


def check_recipe(recipe: Recipe, model: type[ExchangeSection]) -> None:
    """The checks of a technique whose own section is ``model``."""
    technique = model.NAME
    cfg = model.of(recipe)
    k = recipe.num_workers
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
