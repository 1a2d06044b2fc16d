"""DLion's, Gaia's and Ako's recipe sections: every switch is an option, unknown keys and
combinations that make no sense are one line naming the problem and the fix, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetrain import techniques
from edgetrain.errors import RecipeError
from edgetrain.gossip.config import DLionSection
from edgetrain.launch.api import load_checked_recipe
from edgetrain.recipe import parse_recipe
from edgetrain.runtime.side import launcher_side
from tests.helpers.cli import run_cli


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "r.toml"
    p.write_text(text)
    return p


def test_the_three_techniques_are_registered_with_their_sections() -> None:
    fam = techniques.family_spec("gossip")
    for name in ("dlion", "gaia", "ako"):
        spec = fam.techniques[name]
        assert spec.sections == ("gossip", name) and spec.roles == ("trainer",)
        assert techniques.family_of(name) == "gossip"


def test_every_ablation_is_a_recipe_option() -> None:
    body = {
        "train": {"technique": "dlion"},
        "dlion": {
            "batching": False, "t_unit": "slowest", "epsilon": 0.2, "t_bs": 640,
            "lr_policy": "large", "decay_lr": False, "bs_policy": "increase",
            "increase_at": [0.3, 0.6], "increase_factor": 1.5,
            "gradient_exchange": "partial", "threshold": "static", "lan_fraction": 0.2,
            "wan_fraction": 0.02, "contribution": "relative", "bandwidth": "static",
            "we_when": "periodic", "we_every": 5, "we_what": "partial", "we_fraction": 0.1,
            "we_whom": "all", "we_how": "sync", "we_beta": 1.0, "sync": "iteration",
            "staleness": 2, "gradient_weighting": "sample", "sites": ["a", "a", "b"],
            "selective": False, "capacity": "pilot", "pilot_s": 0.5,
            "lan_mbit": 1000, "wan_mbit": 100,
        },
        "workers": [{"count": 3}],
    }  # fmt: skip
    recipe = parse_recipe(body)
    cfg = recipe.section("dlion", DLionSection)
    assert cfg.we_whom == "all" and cfg.threshold == "static" and cfg.sites == ["a", "a", "b"]
    # a recipe reaches the workers with every field filled in: it must validate again
    again = parse_recipe(recipe.to_dict())
    assert again.section("dlion", DLionSection) == cfg
    gaia = parse_recipe({"train": {"technique": "gaia"}, "gaia": {"significance": 0.02,
                         "deployment": "site"}, "workers": [{"count": 2}]})  # fmt: skip
    assert gaia.train.family == "gossip"
    parse_recipe({"train": {"technique": "ako"}, "ako": {"partitions": 3}, "workers": [{}]})


@pytest.mark.parametrize(
    "section, expected",
    [
        ("[dlion]\nbatchign = true\n", "did you mean 'batching'"),
        ("[dlion]\nlr_policy = 'huge'\n", "[dlion] lr_policy"),
        (
            "[dlion]\ngradient_exchange = 'full'\nthreshold = 'static'\n",
            "gradient_exchange = 'full' sends them whole",
        ),
        ("[dlion]\nwe_when = 'none'\nwe_how = 'sync'\n", "we_when = 'none' exchanges none"),
        ("[dlion]\nsync = 'async'\nwe_how = 'sync'\n", "needs every worker to agree"),
        ("[dlion]\nsync = 'async'\nstaleness = 2\n", "with sync = 'async' nobody waits"),
        ("[dlion]\ncapacity = 'profile'\n", "set profile ="),
        ("[dlion]\nincrease_at = [0.5, 1.5]\n", "increase_at must hold progress points"),
        ("[dlion]\nselective_senders = 2\n", "need selective = true"),
        ("[dlion]\nt_bs = 40\n", "t_bs = 40 is below the starting total batch"),
        ("[dlion]\nsites = ['a', 'b']\n", "names 2 sites for 4 workers"),
        ("[dlion]\nselective = true\nsites = ['a', 'a', 'a', 'a']\n", "names only one"),
        ("[gaia]\ndeployment = 'site'\nsites = ['a', 'a', 'a', 'a']\n", "names only one"),
        ("[ako]\npartitions = 0\n", "[ako] partitions"),
    ],
)
def test_bad_exchange_recipes_are_one_line_and_exit_2(tmp_path, capsys, section, expected) -> None:
    technique = section.split("]")[0].lstrip("[")
    body = f"[train]\ntechnique = '{technique}'\nbatch_size = 16\n{section}[[workers]]\ncount = 4\n"
    path = write(tmp_path, body)
    with pytest.raises(RecipeError) as exc:
        recipe, _ = load_checked_recipe(path)
        launcher_side("gossip", recipe.train.technique).check(recipe)  # what launch checks next
    assert expected in str(exc.value)
    code, _, err = run_cli(capsys, "launch", str(path), "--runs-root", str(tmp_path / "runs"))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()
