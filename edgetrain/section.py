"""A recipe section's model: ``[NAME]`` read from a recipe as a typed value with
``Model.of(recipe)`` (its defaults when the recipe leaves the section out). Torch-free."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, TypeVar

from pydantic import BaseModel

from edgetrain.tomlconfig import SECTION_CONFIG

if TYPE_CHECKING:
    from edgetrain.recipe import Recipe

S = TypeVar("S", bound="Section")


class Section(BaseModel):
    """Base of every family's and technique's section model; ``NAME`` is its TOML table, the
    name its registry entry gives it (a test checks the two agree)."""

    model_config = SECTION_CONFIG

    NAME: ClassVar[str] = ""

    @classmethod
    def of(cls: type[S], recipe: Recipe) -> S:
        """This section of ``recipe``, typed."""
        return recipe.section(cls.NAME, cls)
