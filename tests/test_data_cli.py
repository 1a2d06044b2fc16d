"""``edgetrain data inspect``: text and JSON output, recipes, flags and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgetrain.cli import data_cmd
from edgetrain.errors import DataError, EdgetrainError

RECIPE = """
[run]
seed = 3

[data]
dataset = "synthetic"
shape = [2, 5, 5]
classes = 4
count = 200
partition = "dirichlet"
alpha = 0.3
test_split = 0.25

[[workers]]
count = 2

[[workers]]
count = 1
slowdown = 2.0
"""


def _invoke(*args: str):
    return CliRunner().invoke(data_cmd.app, ["inspect", *args])


def _json(*args: str) -> dict:
    result = _invoke(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.fixture()
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "recipe.toml"
    path.write_text(RECIPE, encoding="utf-8")
    return path


def test_defaults_text_output() -> None:
    result = _invoke()
    assert result.exit_code == 0, result.output
    out = result.output
    assert "digits: 10 classes, input 1x8x8" in out
    assert "1437 train / 360 test" in out
    assert "iid across 4 workers, seed 0" in out
    assert "entropy" in out and "TV" in out


def test_defaults_json_output() -> None:
    data = _json()
    assert data["dataset"] == "digits" and data["input_shape"] == [1, 8, 8]
    assert data["classes"] == 10 and data["train"] == 1437 and data["test"] == 360
    assert data["partition"] == "iid" and data["alpha"] is None and data["workers"] == 4
    assert len(data["parts"]) == 4
    assert sum(p["size"] for p in data["parts"]) == data["train"] == data["total"]
    assert all(sum(p["class_counts"]) == p["size"] for p in data["parts"])


def test_flags_choose_partition() -> None:
    data = _json("--workers", "3", "--partition", "dirichlet", "--alpha", "0.2", "--seed", "4")
    assert len(data["parts"]) == 3 and data["alpha"] == 0.2 and data["seed"] == 4
    assert data["mean_tv_distance"] > 0.2
    data = _json("--workers", "3", "--partition", "fractions", "--fractions", "0.5,0.3,0.2")
    assert [p["size"] for p in data["parts"]] == [719, 431, 287]
    assert data["fractions"] == [0.5, 0.3, 0.2]


def test_recipe_file(recipe: Path) -> None:
    data = _json(str(recipe))
    assert data["dataset"] == "synthetic" and data["input_shape"] == [2, 5, 5]
    assert data["classes"] == 4 and data["train"] == 150 and data["test"] == 50
    assert data["partition"] == "dirichlet" and data["alpha"] == 0.3 and data["seed"] == 3
    assert data["workers"] == 3 and len(data["parts"]) == 3
    result = _invoke(str(recipe))
    assert result.exit_code == 0, result.output
    assert "synthetic: 4 classes, input 2x5x5" in result.output
    assert "dirichlet (alpha 0.3) across 3 workers, seed 3" in result.output


def test_flags_override_the_recipe(recipe: Path) -> None:
    data = _json(str(recipe), "--dataset", "digits", "--workers", "2", "--partition", "iid")
    assert data["dataset"] == "digits" and data["train"] == 1347  # test_split 0.25
    assert len(data["parts"]) == 2 and data["partition"] == "iid" and data["seed"] == 3
    assert _json(str(recipe), "--seed", "9")["seed"] == 9


def test_real_mnist_folder(mnist_test_dir: Path) -> None:
    data = _json("--dataset", "mnist", "--root", str(mnist_test_dir), "--workers", "2")
    assert data["input_shape"] == [1, 28, 28] and data["train"] == 8000 and data["test"] == 2000


@pytest.mark.parametrize(
    "args",
    [
        ["--partition", "random"],
        ["--dataset", "imagenet"],
        ["--workers", "0"],
        ["--workers", "many"],
        ["--alpha", "x"],
    ],
)
def test_bad_flag_values_are_usage_errors(args: list[str]) -> None:
    result = _invoke(*args)
    assert result.exit_code == 2
    assert "Invalid value" in result.output


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (["--partition", "dirichlet", "--alpha", "-1"], EdgetrainError, r"\[data\] alpha"),
        (["--partition", "fractions"], EdgetrainError, "needs fractions"),
        (["--partition", "fractions", "--fractions", "0.5,x"], DataError, "--fractions '0.5,x'"),
        (["--dataset", "mnist"], DataError, "pass --root DIR"),
        (["--workers", "5000"], DataError, "cannot split 1437 samples across 5000 workers"),
    ],
)
def test_bad_values_raise_edgetrain_errors(
    args: list[str], error: type[Exception], match: str
) -> None:
    result = _invoke(*args)
    assert result.exit_code != 0
    assert isinstance(result.exception, error)
    with pytest.raises(error, match=match):
        raise result.exception


def test_missing_dataset_dir_and_recipe(tmp_path: Path) -> None:
    result = _invoke("--dataset", "cifar10", "--root", str(tmp_path))
    assert isinstance(result.exception, DataError)
    assert "no CIFAR-10 batches" in str(result.exception)
    result = _invoke(str(tmp_path / "missing.toml"))
    assert isinstance(result.exception, EdgetrainError) and "not found" in str(result.exception)


def test_help_has_an_example() -> None:
    result = CliRunner().invoke(data_cmd.app, ["inspect", "--help"])
    assert result.exit_code == 0 and "edgetrain data inspect" in result.output
