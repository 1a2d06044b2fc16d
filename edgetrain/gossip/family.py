"""The gossip family on the launcher side: drain accounting, the averaged model, resume.

Every worker is a trainer. The controller's only decision is at drain: each worker learns how
many messages each live peer sent it, so it can wait until everything in flight has arrived
(messages from failed workers are not counted: they may or may not arrive). The run's model
is the alpha-weighted average of the hand-ins, the quantity GoSGD preserves. A resumed run
spreads a checkpoint over the recipe's workers: survivors keep their weights with alphas
rescaled to ``(survivors / workers)`` in total, and a worker missing from the checkpoint starts
from the others' average with ``1 / workers``, so the alphas sum to 1 again (gossip in flight
at the checkpoint is not in it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgetrain.comm.control import Controller, CoordinationPolicy, HandIn, Role
from edgetrain.gossip.config import GossipSection
from edgetrain.gossip.drain import GossipController
from edgetrain.gossip.mixing import weighted_average
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import FamilyDefaults, FinalModel, HandInError, meta_float
from edgetrain.runtime.context import RunRecord
from edgetrain.runtime.predict import Prediction, Setting
from edgetrain.runtime.weights import model_arrays


def spread_handins(handins: Mapping[int, HandIn], num_workers: int) -> dict[int, HandIn]:
    """A hand-in for every one of ``num_workers`` workers, alphas summing to 1 (see above)."""
    alphas = {i: meta_float(h, "alpha", i) for i, h in handins.items()}
    total = sum(alphas.values())
    if total <= 0:
        raise HandInError("checkpoint alphas sum to zero; it cannot be resumed")
    share = len(handins) / num_workers
    out = {
        i: HandIn(h.weights, {**h.meta, "alpha": alphas[i] / total * share})
        for i, h in handins.items()
    }
    missing = [i for i in range(num_workers) if i not in handins]
    if missing:
        average = weighted_average(
            [(alphas[i], model_arrays(h.weights)) for i, h in handins.items()]
        )
        for i in missing:
            out[i] = HandIn(average, {"alpha": 1.0 / num_workers, "from_average": True})
    return out


class GossipFamily(FamilyDefaults):
    """The launcher side of every gossip technique: GoSGD's, the defaults the others override
    (EdgeGossip in :mod:`edgetrain.gossip.edgegossip.side`, DLion, Gaia and Ako in
    :mod:`edgetrain.gossip.exchange.side`)."""

    name = "gossip"

    def check(self, recipe: Recipe) -> None:
        return None

    def policy(self, recipe: Recipe) -> CoordinationPolicy:
        cfg = GossipSection.of(recipe)
        return CoordinationPolicy(epoch_roles=frozenset({"trainer"}), barriers=cfg.sync_epochs)

    def controller(self, recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> Controller:
        """GoSGD's drain accounting."""
        return GossipController()

    def layout(self, recipe: Recipe, slots: int) -> Sequence[tuple[str, int]] | None:
        """A trainer on every slot; gossip needs two."""
        if slots < 2:
            raise ValueError("gossip needs at least 2 workers to exchange")
        return [("trainer", slots)]

    def report(self, run: RunRecord) -> dict[str, Any] | None:
        """Finish-time spread per epoch."""
        from edgetrain.gossip.spread_report import gossip_report

        return gossip_report(run.manifest, run.workers)

    def final_model(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> FinalModel:
        return average_model(handins)

    def resume(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> dict[int, HandIn]:
        return spread_handins(handins, len(roles))

    def predict(self, recipe: Recipe, setting: Setting) -> Prediction | None:
        """GoSGD's cost model (:mod:`edgetrain.gossip.cost_gosgd`); the other techniques'
        sides give their own."""
        from edgetrain.gossip.cost_gosgd import predict_gosgd

        return predict_gosgd(recipe, setting)


def average_model(handins: Mapping[int, HandIn]) -> FinalModel:
    """The alpha-weighted average of the hand-ins (the quantity GoSGD preserves)."""
    if not handins:
        raise HandInError("no worker handed in final weights")
    states = [(meta_float(h, "alpha", i), model_arrays(h.weights)) for i, h in handins.items()]
    alpha_sum = sum(a for a, _ in states)
    if alpha_sum <= 0:
        raise HandInError("the final alphas sum to zero")
    info = {"workers": len(states), "alpha_sum": alpha_sum}
    return FinalModel(weighted_average(states), info, event="averaged")


FAMILY = GossipFamily()
