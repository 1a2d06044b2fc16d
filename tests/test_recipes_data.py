"""Every shipped recipe through the commands that take a recipe and only read its data
(``data inspect`` and ``aggregate``; issue 30: both crashed on every pipeline recipe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgetrain.recipe import load_recipe
from tests.helpers.cli import run_cli
from tests.helpers.paths import REPO

RECIPES = sorted((REPO / "recipes").glob("*.toml"))
BUILT_IN = {"digits", "synthetic"}


def _data_flags(recipe: Path, request: pytest.FixtureRequest) -> list[str]:
    """``--root`` for a recipe on real files (from ``test_data_dir``, skipped when absent)."""
    dataset = load_recipe(recipe, check_paths=False)[0].data.dataset
    if dataset in BUILT_IN:
        return []
    data_dir: Path = request.getfixturevalue("test_data_dir")
    return ["--root", str(data_dir / f"{dataset}-test")]


def test_there_are_recipes() -> None:
    assert len(RECIPES) >= 6 and any(p.name == "mcpipe.toml" for p in RECIPES)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_data_inspect_every_recipe(
    capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest, recipe: Path
) -> None:
    flags = _data_flags(recipe, request)
    code, out, err = run_cli(capsys, "data", "inspect", str(recipe), *flags, "-f", "json")
    assert code == 0, err
    data = json.loads(out)
    parsed = load_recipe(recipe, check_paths=False)[0]
    sizes = [p["size"] for p in data["parts"]]
    assert data["train"] > 0 and all(s > 0 for s in sizes)
    assert data["workers"] == parsed.num_data_workers
    if parsed.num_data_workers:  # one disjoint shard per data worker, covering the split
        assert data["feed"] is None and data["partition"] == parsed.data.partition
        assert len(sizes) == parsed.num_data_workers and sum(sizes) == data["train"]
    else:  # the pipeline: the whole split feeds stage 0 (or every replica)
        assert data["feed"] and "whole training split" in data["feed"]
        assert data["partition"] is None and sizes == [data["train"]]
    code, out, err = run_cli(capsys, "data", "inspect", str(recipe), *flags)
    assert code == 0 and not err and "train /" in out and "entropy" in out
    assert ("partition: none," in out) == (not parsed.num_data_workers)


def test_data_inspect_pipeline_replicas(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Data-parallel replicas each take a slice of every microbatch of the whole split."""
    text = (REPO / "recipes" / "mcpipe.toml").read_text()
    text = text.replace('technique = "mcpipe"', 'technique = "dataparallel"')
    text = text.replace('role = "stage"\ncount = 3', 'role = "replica"\ncount = 2')
    recipe = tmp_path / "dp.toml"
    recipe.write_text(text)
    code, out, err = run_cli(capsys, "data", "inspect", str(recipe), "-f", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["feed"].startswith("each of the 2 replicas trains on its 1/2 slice")
    assert [p["size"] for p in data["parts"]] == [data["train"]]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_aggregate_every_recipe(
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    tmp_path: Path,
    recipe: Path,
) -> None:
    flags = _data_flags(recipe, request)
    run = tmp_path / "run"
    code, out, err = run_cli(
        capsys, "aggregate", str(recipe), *flags, "--run-dir", str(run), "-f", "json"
    )
    assert code == 0, err
    report = json.loads(out)
    names = [p["partition"] for p in report["partitions"]]
    shards = load_recipe(recipe, check_paths=False)[0].num_data_workers
    assert names == ([str(i) for i in range(shards)] if shards else ["all"])
    assert all(p["samples"] > 0 and p["points"] > 0 for p in report["partitions"])
    assert sorted(f.name for f in (run / "data").glob("aggregates-*.npz")) == sorted(
        f"aggregates-{n}.npz" for n in names
    )
