"""Every shipped recipe (``recipes/*.toml``), launched as a user launches it, trains to a sane
accuracy on digits: the README's tour runs each of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.launching import completed
from tests.helpers.paths import RECIPES

SHIPPED = sorted(RECIPES.glob("*.toml"))
# the least final test accuracy each recipe must reach on digits (10 classes: chance is 0.10)
LEAST = {
    "quickstart": 0.95,
    "edgegossip": 0.90,
    "dlion": 0.90,
    "dynacomm": 0.90,
    "mercury": 0.90,
    "mcpipe": 0.90,
}


def test_every_shipped_recipe_has_an_accuracy_floor() -> None:
    assert sorted(p.stem for p in SHIPPED) == sorted(LEAST)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("recipe", SHIPPED, ids=lambda p: p.stem)
def test_a_shipped_recipe_trains_to_its_accuracy(recipe: Path, tmp_path: Path) -> None:
    _, summary = completed(recipe, tmp_path / "runs", timeout=200, cwd=tmp_path)
    assert summary["test_accuracy"] >= LEAST[recipe.stem], summary["test_accuracy"]
