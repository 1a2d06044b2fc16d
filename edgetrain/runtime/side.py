"""A run's launcher side: its technique's :class:`~edgetrain.runtime.base.TechniqueSide` over
its family's defaults, as one :class:`~edgetrain.runtime.base.Family` the launcher calls.

Every hook is the technique's where it declares one, else the family's (a technique whose check
extends its family's calls the family's check itself). Nothing here knows a family or a
technique by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgetrain import techniques
from edgetrain.comm.control import Controller, CoordinationPolicy, Event, HandIn, Role
from edgetrain.errors import RecipeError
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import Family, FinalModel, TechniqueSide, WireLoad
from edgetrain.runtime.context import RunRecord
from edgetrain.runtime.predict import Prediction, Setting

__all__ = ["Launcher", "launcher_side", "side_of"]


def side_of(family: str, technique: str) -> TechniqueSide:
    """The technique's declared side (an empty one when its registry entry names none)."""
    target = techniques.technique_spec(family, technique).side
    if target is None:
        return TechniqueSide()
    side = techniques.resolve(target)
    if not isinstance(side, TechniqueSide):
        raise RecipeError(
            f"technique '{technique}': its side {target} is a {type(side).__name__}, "
            "not a TechniqueSide",
            "make the registry entry's side name a TechniqueSide object",
        )
    return side


class Launcher:
    """The hooks of one technique on one family, composed (see the module's docstring)."""

    def __init__(self, family: Family, side: TechniqueSide) -> None:
        self.family = family
        self.side = side
        self.name = family.name

    def check(self, recipe: Recipe) -> None:
        (self.side.check or self.family.check)(recipe)

    def check_run_dir(self, recipe: Recipe, run_dir: Path | None) -> None:
        hook = self.side.check_run_dir or self.family.check_run_dir
        hook(recipe, run_dir)

    def reads(self, recipe: Recipe) -> dict[str, str]:
        return (self.side.reads or self.family.reads)(recipe)

    def wire_load(self, recipe: Recipe, data_bytes: int) -> WireLoad:
        return (self.side.wire_load or self.family.wire_load)(recipe, data_bytes)

    def policy(self, recipe: Recipe) -> CoordinationPolicy:
        return (self.side.policy or self.family.policy)(recipe)

    def controller(self, recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> Controller:
        return (self.side.controller or self.family.controller)(recipe, roles, run_dir)

    def artifacts(self, event: Event) -> dict[str, Any]:
        return (self.side.artifacts or self.family.artifacts)(event)

    def final_model(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> FinalModel:
        return (self.side.final_model or self.family.final_model)(recipe, handins, roles)

    def resume(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> dict[int, HandIn]:
        return (self.side.resume or self.family.resume)(recipe, handins, roles)

    def report(self, run: RunRecord) -> dict[str, Any] | None:
        return (self.side.report or self.family.report)(run)

    def report_files(self, report_dir: Path, technique_report: Mapping[str, Any]) -> list[str]:
        return (self.side.report_files or self.family.report_files)(report_dir, technique_report)

    def predict(self, recipe: Recipe, setting: Setting) -> Prediction | None:
        return (self.side.predict or self.family.predict)(recipe, setting)

    def layout(self, recipe: Recipe, slots: int) -> Sequence[tuple[str, int]] | None:
        # a plugin family written before the hook existed has none: its default role throughout
        hook = self.side.layout or getattr(self.family, "layout", None)
        return hook(recipe, slots) if hook is not None else None

    def traffic(self, recipe: Recipe) -> Sequence[tuple[int, int]] | None:
        hook = self.side.traffic or getattr(self.family, "traffic", None)
        return hook(recipe) if hook is not None else None

    def planned(self, recipe: Recipe, setting: Setting) -> dict[str, dict[str, Any]] | None:
        hook = self.side.planned or getattr(self.family, "planned", None)
        return hook(recipe, setting) if hook is not None else None

    def lr_factor(self, recipe: Recipe) -> float:
        hook = self.side.lr_factor or getattr(self.family, "lr_factor", None)
        return float(hook(recipe)) if hook is not None else 1.0


def launcher_side(family: str, technique: str) -> Launcher:
    """The composed launcher side of ``technique`` on ``family`` (imports both packages)."""
    return Launcher(techniques.load_family(family), side_of(family, technique))
