"""The cost model of the techniques on the exchange loop, as their sides' ``predict`` hook:
the recipe's shape, then DLion's (:mod:`.cost_dlion`), Gaia's (:mod:`.cost_gaia`) or Ako's
(:mod:`.cost_ako`) model, each one round of the loop timed by :mod:`.cost_round`. Pure.

The sites come from the section's ``sites`` (a hosts file's are not known to the setting:
without them every link is LAN); T_bs's default (10% of the training set) is not applied,
since the setting does not know the training set's size.
"""

from __future__ import annotations

from dataclasses import replace

from edgetrain.gossip.config import AkoSection, DLionSection, ExchangeSection, GaiaSection
from edgetrain.gossip.cost_model import DEFAULT, on_reference
from edgetrain.gossip.exchange.cost_calibration import Calibration
from edgetrain.gossip.exchange.cost_round import ExchangeShape
from edgetrain.recipe import Recipe
from edgetrain.runtime.predict import Prediction, Setting


def exchange_shape(recipe: Recipe, cfg: ExchangeSection) -> ExchangeShape:
    """The recipe's :class:`ExchangeShape`."""
    workers = [i for i, r in enumerate(recipe.role_names()) if r == "trainer"]
    train = recipe.train
    return ExchangeShape(workers, train.batch_size, cfg.sites, None, train.lr, train.epochs)


def predict_recipe(
    recipe: Recipe,
    setting: Setting,
    model: type[ExchangeSection],
    calibration: Calibration | None = None,
) -> Prediction | None:
    """The prediction for the technique whose section is ``model`` (None: DLion's selective
    propagation, which has no model); ``calibration``: a pilot's measured terms
    (:func:`.cost_dlion.calibrated`; None: a priori)."""
    cfg = model.of(recipe)
    shape = replace(exchange_shape(recipe, cfg), calibration=calibration)
    # a priori, the constants' CPU seconds on the profile's cores; a calibration was measured
    # on the very hosts against the constants as they are
    c = on_reference(DEFAULT, setting) if calibration is None else DEFAULT
    if isinstance(cfg, DLionSection):
        from edgetrain.gossip.exchange.cost_dlion import predict_dlion

        return None if cfg.selective else predict_dlion(setting, shape, cfg, c)
    if isinstance(cfg, GaiaSection):
        from edgetrain.gossip.exchange.cost_gaia import predict_gaia

        return predict_gaia(setting, shape, cfg, c)
    if isinstance(cfg, AkoSection):
        from edgetrain.gossip.exchange.cost_ako import predict_ako

        return predict_ako(setting, shape, cfg, c)
    return None
