"""The launcher side shared by the techniques on the exchange loop (DLion, Gaia, Ako): each
declares its :class:`~edgetrain.runtime.base.TechniqueSide` with :func:`exchange_side`, naming
its section, its title in the report and whether it plans DLion's batches.

Over the family's defaults it adds: the recipe checks that need more than the section
(:mod:`.exchange_checks`), the controller that plans every worker's batch at start
(:mod:`.exchange_control`), ``plans/batches.json`` from the first epoch report, and the report's
batches, idle fractions, iterations and bytes per link class (:mod:`.exchange_report`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgetrain.comm.control import Controller, Event, Role
from edgetrain.gossip.config import DLionSection, ExchangeSection
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import TechniqueSide


def batches_file(event: Event) -> dict[str, Any]:
    """``plans/batches.json``: the plan the run started from (batch sizes, T_unit, the achieved
    spread), as the first worker to report an epoch echoed it."""
    plan = event.data.get("plan") if event.kind == "epoch" else None
    return {"plans/batches.json": plan} if isinstance(plan, dict) else {}


def exchange_side(
    model: type[ExchangeSection], display: str, *, plans_batches: bool = False
) -> TechniqueSide:
    """The side of an exchange technique whose own section is ``model``, titled ``display`` in
    the report; ``plans_batches``: the controller plans DLion's capacity-aware batches from
    its section (else b0 each)."""

    def check(recipe: Recipe) -> None:
        from edgetrain.gossip.exchange_checks import check_recipe

        check_recipe(recipe, model)

    def controller(recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> Controller:
        from edgetrain.gossip.exchange_control import ExchangeController

        dlion = DLionSection.of(recipe) if plans_batches else None
        return ExchangeController(recipe, roles, dlion)

    def report(
        manifest: dict[str, Any],
        workers: Mapping[int, list[dict[str, Any]]],
        coordinator: list[dict[str, Any]],
    ) -> dict[str, Any] | None:
        from edgetrain.gossip.exchange_report import exchange_report
        from edgetrain.gossip.report import gossip_report

        out = gossip_report(manifest, workers)
        if out is not None:
            own = exchange_report(manifest, workers, display)
            if own is not None:
                out["markdown"] = f"{out['markdown']}\n\n{own.pop('markdown')}"
                out["exchange"] = own
        return out

    return TechniqueSide(check=check, controller=controller, artifacts=batches_file, report=report)
