"""``edgetrain aggregate``: files per partition, summary, recipe settings, errors; the store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgetrain.aggregate import AggregateConfig, build_aggregates, read_aggregates
from edgetrain.aggregate.store import write_aggregates
from edgetrain.cli import aggregate_cmd
from edgetrain.data import load_dataset, partition_indices
from edgetrain.errors import DataError
from edgetrain.recipe import DataSection
from tests.helpers.cli import run_cli


@pytest.fixture(autouse=True)
def _wired(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the commands on the real app for this test unless the lead has wired them."""
    from edgetrain.cli import app as app_module

    if "aggregate" not in {c.name for c in app_module.app.registered_commands}:
        commands = list(app_module.app.registered_commands)
        monkeypatch.setattr(app_module.app, "registered_commands", commands)
        app_module.app.command("aggregate")(aggregate_cmd.aggregate)
        app_module.app.command("aggregate-eval")(aggregate_cmd.aggregate_eval)


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code, out, err = run_cli(capsys, *args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_unpartitioned_digits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _json(capsys, "aggregate", "--run-dir", str(tmp_path), "--ratio", "5")
    assert [p["partition"] for p in rep["partitions"]] == ["all"]
    part = rep["partitions"][0]
    agg = read_aggregates(tmp_path / "data" / "aggregates-all.npz")
    ds = load_dataset(DataSection(), 0)
    assert part["samples"] == len(ds.y_train) == agg.num_samples  # training split only
    assert part["points"] == len(agg.points)
    assert agg.method == "svd+kmeans" and agg.ratio == 5 and agg.dims == 10
    assert set(agg.timings) == {"reduce", "divide", "aggregate"}
    assert agg.points.shape[1:] == ds.x_train.shape[1:]
    m = 3
    idx = agg.member_indices[agg.member_offsets[m] : agg.member_offsets[m + 1]]
    np.testing.assert_allclose(agg.points[m], ds.x_train[idx].mean(axis=0), atol=1e-5)
    assert rep["sizes"]["subsets"] == len(agg.points)


def test_recipe_partitions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        '[run]\nseed = 4\n[data]\ndataset = "digits"\npartition = "dirichlet"\nalpha = 1.0\n'
        '[aggregate]\nreduce = "hash"\ndivide = "lsh"\nratio = 8\n[[workers]]\ncount = 3\n'
    )
    run = tmp_path / "run"
    rep = _json(capsys, "aggregate", str(recipe), "--run-dir", str(run))
    assert rep["method"] == "hash+lsh" and rep["ratio"] == 8 and rep["seed"] == 4
    ds = load_dataset(DataSection(), 4)
    parts = partition_indices(ds.y_train, 3, "dirichlet", 4, alpha=1.0)
    for i, part in enumerate(parts):
        agg = read_aggregates(run / "data" / f"aggregates-{i}.npz")
        assert agg.num_samples == len(part)
        assert sorted(agg.member_indices.tolist()) == list(range(len(part)))
        y = ds.y_train[part]
        for m in range(len(agg.points)):
            members = agg.member_indices[agg.member_offsets[m] : agg.member_offsets[m + 1]]
            assert set(y[members].tolist()) == {int(agg.labels[m])}
    assert not (run / "data" / "aggregates-all.npz").exists()


def test_flags_override_recipe_and_workers(tmp_path: Path, capsys) -> None:
    rep = _json(
        capsys, "aggregate", "--workers", "2", "--reduce", "isvd", "--divide", "gmm",
        "--run-dir", str(tmp_path),
    )  # fmt: skip
    assert [p["partition"] for p in rep["partitions"]] == ["0", "1"]
    assert rep["method"] == "isvd+gmm"
    assert rep["partitions"][0]["dims"] == 2


def test_text_summary(tmp_path: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "aggregate", "--run-dir", str(tmp_path), "--divide", "lsh")
    assert code == 0
    assert "subset sizes" in out and "time per step" in out and "svd+lsh" in out


def test_errors_exit_2(tmp_path: Path, capsys) -> None:
    code, _, err = run_cli(capsys, "aggregate")
    assert code == 2 and "--run-dir" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "aggregate", "--dataset", "mnist", "--run-dir", str(tmp_path))
    assert code == 2 and "--root" in err
    code, _, err = run_cli(capsys, "aggregate", "--reduce", "nope", "--run-dir", str(tmp_path))
    assert code == 2
    code, _, err = run_cli(
        capsys, "aggregate", "--partition", "dirichlet", "--run-dir", str(tmp_path)
    )
    assert code == 2 and "--workers" in err
    assert not (tmp_path / "data").exists()
    code, _, err = run_cli(capsys, "aggregate-eval", "--dataset", "mnist", "--out", str(tmp_path))
    assert code == 2 and "--root" in err


def test_store_roundtrip_and_bad_files(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((40, 1, 2, 2)).astype(np.float32)
    y = np.arange(40) % 2
    agg = build_aggregates(x, y, AggregateConfig(ratio=4))
    path = tmp_path / "a.npz"
    write_aggregates(path, agg)
    back = read_aggregates(path)
    for name in ("points", "labels", "member_offsets", "member_indices"):
        np.testing.assert_array_equal(getattr(back, name), getattr(agg, name))
    assert back.timings == agg.timings and back.method == agg.method
    with pytest.raises(DataError, match="not found"):
        read_aggregates(tmp_path / "missing.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="not a readable"):
        read_aggregates(tmp_path / "bad.npz")
    np.savez(tmp_path / "partial.npz", points=agg.points)
    with pytest.raises(DataError, match="lacks"):
        read_aggregates(tmp_path / "partial.npz")


def test_eval_digits_table_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _json(
        capsys, "aggregate-eval", "--dataset", "digits", "--epochs", "2", "--out", str(tmp_path)
    )
    methods = [r["method"] for r in rep["rows"]]
    assert methods == [
        "svd+gmm", "pca+kmeans", "pca+lsh", "svd+lsh", "svd+kmeans", "svd-sample+kmeans",
        "isvd+lsh", "hash+kmeans", "histogram+kmeans", "all data",
    ]  # fmt: skip
    for r in rep["rows"]:
        assert 0.0 <= r["accuracy"] <= 1.0
        if r["timings"] is not None:
            assert set(r["timings"]) == {"reduce", "divide", "aggregate"}
            assert r["points"] < rep["train_samples"]
    png = tmp_path / "aggregate-eval-digits.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "aggregate-eval-digits.json").read_text())["rows"]


def test_mnist_test_set(
    test_data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(test_data_dir / "mnist-test")
    rep = _json(
        capsys, "aggregate", "--dataset", "mnist", "--root", root, "--reduce", "isvd",
        "--divide", "lsh", "--run-dir", str(tmp_path),
    )  # fmt: skip
    part = rep["partitions"][0]
    assert part["samples"] == 8000 and part["dims"] == 3  # 80% of t10k is the training split
    agg = read_aggregates(tmp_path / "data" / "aggregates-all.npz")
    assert agg.points.shape[1:] == (1, 28, 28)
    assert sorted(agg.member_indices.tolist()) == list(range(8000))


def test_unwritable_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "run"
    blocker.mkdir()
    (blocker / "data").write_text("a file where the data directory should be")
    code, _, err = run_cli(capsys, "aggregate", "--run-dir", str(blocker))
    assert code == 2 and "cannot write" in err and "Traceback" not in err


def test_recipe_without_run_dir_makes_one(tmp_path: Path, capsys) -> None:
    recipe = tmp_path / "r.toml"
    runs = tmp_path / "runs"
    recipe.write_text(f'[run]\nname = "agg"\nrun_dir = "{runs}"\n[[workers]]\ncount = 2\n')
    rep = _json(capsys, "aggregate", str(recipe))
    run = Path(rep["run_dir"])
    assert run.parent == runs and run.name.startswith("agg-")
    assert sorted(p.name for p in (run / "data").iterdir()) == [
        "aggregates-0.npz",
        "aggregates-1.npz",
    ]
