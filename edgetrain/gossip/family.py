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

from edgetrain.comm.control import Controller, CoordinationPolicy, Decision, HandIn, Role
from edgetrain.comm.coordinator import Event
from edgetrain.gossip.config import GossipSection
from edgetrain.gossip.mixing import weighted_average
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import FinalModel, HandInError, meta_float
from edgetrain.runtime.weights import model_arrays


def drain_expectations(
    sent: Mapping[int, Mapping[int, int]], alive: Sequence[int]
) -> dict[int, dict[str, int]]:
    """For each alive worker, how many messages each other alive worker sent it.

    ``sent[j][i]``: messages worker j reports it sent to worker i. Pure."""
    return {i: {str(j): int(sent.get(j, {}).get(i, 0)) for j in alive if j != i} for i in alive}


def _sent_counts(report: Mapping[str, Any]) -> dict[int, int]:
    """A ``done`` report's per-peer send counts, with anything malformed left out."""
    sent = report.get("sent", {})
    if not isinstance(sent, dict):
        return {}
    return {
        int(k): v
        for k, v in sent.items()
        if str(k).isdigit() and isinstance(v, int) and not isinstance(v, bool) and v >= 0
    }


EXCHANGE = ("dlion", "gaia", "ako")  # techniques on the shared exchange loop (decentral.py)


class GossipController:
    """Drain accounting: the gossip family's only per-worker decision."""

    def on_start(self, ready: Mapping[int, Mapping[str, Any]]) -> Decision:
        return Decision()

    def on_barrier(self, epoch: int, reports: Mapping[int, Mapping[str, Any]]) -> Decision:
        return Decision()

    def on_drain(self, done: Mapping[int, Mapping[str, Any]]) -> Decision:
        alive = sorted(done)
        sent = {j: _sent_counts(report) for j, report in done.items()}
        expect = drain_expectations(sent, alive)
        return Decision({i: {"expect_from": expect[i]} for i in alive})


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


class GossipFamily:
    """The launcher side of every gossip technique."""

    name = "gossip"

    def check(self, recipe: Recipe) -> None:
        if recipe.train.technique == "edgegossip":
            from edgetrain.gossip.balancing import check_recipe

            check_recipe(recipe)
        elif recipe.train.technique in EXCHANGE:
            from edgetrain.gossip.exchange_checks import check_recipe as check_exchange

            check_exchange(recipe)

    def policy(self, recipe: Recipe) -> CoordinationPolicy:
        cfg = recipe.section("gossip", GossipSection)
        return CoordinationPolicy(epoch_roles=frozenset({"trainer"}), barriers=cfg.sync_epochs)

    def controller(self, recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> Controller:
        """GoSGD's drain accounting; EdgeGossip adds its balancer at start and each barrier."""
        if recipe.train.technique == "edgegossip":
            from edgetrain.gossip.balancing import controller_for

            return controller_for(recipe, roles)
        if recipe.train.technique in EXCHANGE:
            from edgetrain.gossip.exchange_control import ExchangeController

            return ExchangeController(recipe, roles)
        return GossipController()

    def report(
        self,
        manifest: dict[str, Any],
        workers: Mapping[int, list[dict[str, Any]]],
        coordinator: list[dict[str, Any]],
    ) -> dict[str, Any] | None:
        """Finish-time spread per epoch; EdgeGossip's r_i, predictor error and overheads;
        DLion's, Gaia's and Ako's batch sizes, idle fractions, iterations and bytes per link
        class."""
        from edgetrain.gossip.exchange_report import exchange_report
        from edgetrain.gossip.report import gossip_report

        out = gossip_report(manifest, workers)
        if out is not None and manifest.get("technique") in EXCHANGE:
            own = exchange_report(manifest, workers)
            if own is not None:
                out["markdown"] = f"{out['markdown']}\n\n{own.pop('markdown')}"
                out["exchange"] = own
        return out

    def artifacts(self, event: Event) -> dict[str, Any]:
        """``plans/batches.json``: the plan DLion, Gaia and Ako start from (batch sizes,
        T_unit, the achieved spread), as the first worker to report an epoch echoed it."""
        plan = event.data.get("plan") if event.kind == "epoch" else None
        return {"plans/batches.json": plan} if isinstance(plan, dict) else {}

    def final_model(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> FinalModel:
        if not handins:
            raise HandInError("no worker handed in final weights")
        states = [(meta_float(h, "alpha", i), model_arrays(h.weights)) for i, h in handins.items()]
        alpha_sum = sum(a for a, _ in states)
        if alpha_sum <= 0:
            raise HandInError("the final alphas sum to zero")
        info = {"workers": len(states), "alpha_sum": alpha_sum}
        return FinalModel(weighted_average(states), info, event="averaged")

    def resume(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> dict[int, HandIn]:
        return spread_handins(handins, len(roles))


FAMILY = GossipFamily()
