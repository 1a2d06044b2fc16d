"""Recipes: the quickstart loads; every bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from edgetrain import tomlconfig
from edgetrain.errors import DeprecatedSpelling, RecipeError
from edgetrain.launch.api import load_checked_recipe
from edgetrain.recipe import load_recipe, parse_recipe
from edgetrain.runtime.side import launcher_side
from tests.helpers.cli import run_cli

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "r.toml"
    p.write_text(text)
    return p


def test_quickstart_recipe_loads() -> None:
    recipe, text = load_recipe(REPO / "recipes" / "quickstart.toml")
    assert "[[workers]]" in text
    assert [w.slowdown for w in recipe.expanded_workers()] == [1, 1, 2, 4]
    assert recipe.train.family == "gossip" and recipe.train.technique == "gosgd"
    assert recipe.role_names() == ["trainer"] * 4 and recipe.run.runs_root == "runs"
    assert recipe.data.dataset == "digits"


def test_defaults_and_round_trip() -> None:
    r = parse_recipe({"workers": [{"count": 3}]})
    assert r.num_workers == 3 and r.train.epochs >= 1 and r.data.partition == "iid"
    assert parse_recipe(r.to_dict()) == r


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            "[train]\nepoch = 3\n[[workers]]\n",
            "unknown key 'epoch' in [train]; did you mean 'epochs'",
        ),
        ("[train]\nepochs = 'ten'\n[[workers]]\n", "[train] epochs"),
        ("[bogus]\nx = 1\n[[workers]]\n", "unknown key 'bogus'"),
        ("[[workers]]\nslowdown = 0.5\n", "[[workers]] #1 slowdown"),
        ("[[workers]]\n[[workers]]\ncolour = 'red'\n", "unknown key 'colour' in [[workers]] #2"),
        (
            "[data]\npartition = 'fractions'\nfractions = [0.5, 0.6]\n[[workers]]\ncount = 2\n",
            "fractions must be positive and sum to 1",
        ),
        ("[data]\ndataset = 'mnist'\n[[workers]]\n", "needs root"),
        (
            "[train]\ntechnique = 'sgdx'\n[[workers]]\n",
            "technique 'sgdx' is not a gossip technique; known families and techniques: gossip:",
        ),
        ("[train]\nfamily = 'nope'\n[[workers]]\n", "unknown family 'nope'"),
        ("[[workers]]\nrole = 'server'\n", "role 'server' is not a role of gossip/gosgd"),
        ("[gossip]\nprobabilty = 0.5\n[[workers]]\n", "did you mean 'probability'"),
        ("[run]\nname = 'x'\n", "[[workers]]: missing; add"),
        ("[run\nname = 'x'\n", "not valid TOML"),
        ("[model]\nname = 'resnet19'\n[[workers]]\n", "[model] unknown model 'resnet19'"),
        (
            "[model]\nname = 'mlp'\noptions = { depth = 3 }\n[[workers]]\n",
            "[model] model 'mlp' has no option 'depth'",
        ),
    ],
)
def test_bad_recipes_name_the_file_and_the_key(tmp_path, capsys, body, expected) -> None:
    path = write(tmp_path, body)
    with pytest.raises(RecipeError) as exc:
        load_checked_recipe(path)
    assert expected in str(exc.value)
    assert str(path) in str(exc.value)
    code, out, err = run_cli(capsys, "launch", str(path), "--runs-root", str(tmp_path / "runs"))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err
    assert not (tmp_path / "runs").exists()  # nothing half-written


def test_the_old_spelling_loads_with_one_notice(tmp_path, capsys) -> None:
    old = (
        "[run]\nrun_dir = 'old'\n[train]\ntechnique = 'gossip'\nalgorithm = 'gosgd'\n[[workers]]\n"
    )
    with pytest.warns(DeprecatedSpelling) as notes:
        recipe = parse_recipe(tomlconfig.loads(old))
    assert recipe.train.family == "gossip" and recipe.train.technique == "gosgd"
    assert recipe.run.runs_root == "old"
    assert len(notes) == 2 and 'family = "gossip" with technique = "gosgd"' in str(notes[1].message)
    body = "[train]\ntechnique = 'gossip'\nepochs = 0\n[[workers]]\n"  # bad: stops at the check
    code, _, err = run_cli(capsys, "launch", str(write(tmp_path, body)))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 2
    assert (
        lines[0].startswith('note: [train] technique = "gossip"') and "[train] epochs" in lines[1]
    )


def test_a_technique_alone_names_its_family() -> None:
    recipe = parse_recipe({"train": {"technique": "gosgd"}, "workers": [{}]})
    assert recipe.train.family == "gossip"
    assert parse_recipe(recipe.to_dict()) == recipe


def test_missing_recipe_file(tmp_path, capsys) -> None:
    code, _, err = run_cli(capsys, "launch", str(tmp_path / "nope.toml"))
    assert code == 2 and "nope.toml" in err and "not found" in err and err.count("\n") == 1


def test_missing_data_root_names_the_key(tmp_path, capsys) -> None:
    path = write(
        tmp_path, f"[data]\ndataset = 'mnist'\nroot = '{tmp_path / 'absent'}'\n[[workers]]\n"
    )
    code, _, err = run_cli(capsys, "launch", str(path))
    assert code == 2 and "[data] root" in err and "absent" in err


def test_bad_data_fails_before_anything_starts(tmp_path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    body = f"[data]\ndataset = 'mnist'\nroot = '{empty}'\n[[workers]]\n"
    code, _, err = run_cli(
        capsys, "launch", str(write(tmp_path, body)), "--runs-root", str(tmp_path / "runs")
    )
    assert code == 2 and err.count("\n") == 1 and "no mnist IDX files" in err
    body = "[data]\nmax_samples = 3\n[[workers]]\ncount = 4\n"
    code, _, err = run_cli(
        capsys, "launch", str(write(tmp_path, body)), "--runs-root", str(tmp_path / "runs")
    )
    assert code == 2 and "cannot split 3 samples across 4 workers" in err
    assert not (tmp_path / "runs").exists()


def test_usage_errors_are_one_line(capsys) -> None:
    code, _, err = run_cli(capsys, "launch", "--no-such-flag", "x.toml")
    assert code == 2 and err.count("\n") == 1 and "--no-such-flag" in err
    code, _, err = run_cli(capsys, "no-such-command")
    assert code == 2 and err.count("\n") == 1


def test_real_process_prints_no_traceback(tmp_path) -> None:
    path = write(tmp_path, "[train]\nepochs = -1\n[[workers]]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "edgetrain", "launch", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert "[train] epochs" in proc.stderr


def test_version_and_env(capsys) -> None:
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.startswith("edgetrain ")
    import json

    code, out, _ = run_cli(capsys, "env", "--format", "json")
    report = json.loads(out)
    assert code == 0
    for key in (
        "python",
        "torch",
        "torchvision",
        "pyzmq",
        "libzmq",
        "numpy",
        "edgetrain",
        "cores",
        "memory_bytes",
        "cuda_available",
    ):
        assert key in report


def test_recipes_validate_and_techniques_list_without_torch(tmp_path: Path) -> None:
    # the registry names families and techniques as import strings: validating a recipe of
    # every family and listing the techniques imports no torch (a user's typo is answered fast)
    bodies = [Path("recipes/quickstart.toml").read_text()]
    for family, technique in (("ps", "dynacomm"), ("pipeline", "mcpipe"), ("ps", "mercury")):
        bodies.append(
            f'[data]\ndataset = "digits"\n[model]\nname = "mlp"\n[train]\nfamily = "{family}"\n'
            f'technique = "{technique}"\n[[workers]]\ncount = 2\n'
        )
    paths = []
    for i, body in enumerate(bodies):
        paths.append(tmp_path / f"r{i}.toml")
        paths[-1].write_text(body)
    code = (
        "import sys\n"
        "from edgetrain.recipe import load_recipe\n"
        "from edgetrain.techniques import describe\n"
        f"for p in {[str(p) for p in paths]!r}:\n"
        "    load_recipe(p)\n"
        "assert describe()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize(
    "name", ["quickstart", "edgegossip", "dlion", "dynacomm", "mercury", "mcpipe"]
)
def test_every_example_recipe_passes_the_launch_checks(name: str) -> None:

    recipe, _ = load_checked_recipe(Path("recipes") / f"{name}.toml")
    launcher_side(recipe.train.family, recipe.train.technique).check(recipe)  # launch checks next
    assert recipe.run.name == name


def test_an_adam_run_without_lr_steps_at_adams_default() -> None:
    """``[train] lr``'s default is an SGD step; Adam (Mercury's default optimiser, or
    ``[train] optimizer = "adam"``) without a recipe's lr takes Adam's own, and the resolved
    lr is the run's own on a round trip while a candidate from the user's keys has none."""
    from edgetrain.recipe import ADAM_DEFAULT_LR

    def recipe(train: dict, **sections: dict) -> Any:
        return parse_recipe({"train": train, **sections, "workers": [{"count": 2}]})

    sgd = recipe({"technique": "gosgd"})
    assert sgd.optimizer == "sgd" and sgd.train.lr == 0.05
    merc = recipe({"family": "ps", "technique": "multips-sgd"})
    assert merc.optimizer == "adam" and merc.train.lr == ADAM_DEFAULT_LR
    assert parse_recipe(merc.to_dict()) == merc
    assert "lr" not in merc.model_dump(exclude_unset=True).get("train", {})
    assert recipe({"family": "ps", "technique": "mercury", "lr": 0.004}).train.lr == 0.004
    on_sgd = recipe({"family": "ps", "technique": "mercury"}, mercury={"optimizer": "sgd"})
    assert on_sgd.optimizer == "sgd" and on_sgd.train.lr == 0.05
    adam = recipe({"technique": "gosgd", "optimizer": "adam"})
    assert adam.optimizer == "adam" and adam.train.lr == ADAM_DEFAULT_LR
