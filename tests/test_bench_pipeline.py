"""scripts/bench_pipeline.py's pure parts: the steady-state window, the summaries and ratios,
the recipes of its edgetrain arms, and its arguments (the benchmark itself is not run here)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import tomllib

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_pipeline.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_pipeline", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_pipeline"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_summary_is_median_min_max(bench: ModuleType) -> None:
    assert bench.summary([3.0, 1.0, 2.0, 10.0]) == {"median": 2.5, "min": 1.0, "max": 10.0}
    assert bench.summary([4.0]) == {"median": 4.0, "min": 4.0, "max": 4.0}
    with pytest.raises(ValueError):
        bench.summary([])


def test_ratio_and_goals(bench: ModuleType) -> None:
    assert bench.ratio(27_000.0, 30_000.0) == pytest.approx(0.9)
    with pytest.raises(ValueError):
        bench.ratio(1.0, 0.0)
    local, dp = bench.SPECS["local"], bench.SPECS["dataparallel"]
    assert bench.meets(local, 0.9) and not bench.meets(local, 0.89)
    assert bench.meets(dp, 1.1) and not bench.meets(dp, 1.11)  # time: lower is better


def test_window_drops_warm_up_and_takes_the_slowest_process(bench: ModuleType) -> None:
    fast = [{"epoch": e, "seconds": 1.0, "steps": 10} for e in (1, 2, 3)]
    slow = [{"epoch": 1, "seconds": 9.0, "steps": 10}, {"epoch": 2, "seconds": 2.0, "steps": 10},
            {"epoch": 3, "seconds": 3.0, "steps": 10}]  # fmt: skip
    w = bench.window([fast, slow], first=2)
    assert w["epochs"] == 2 and w["seconds"] == 5.0 and w["steps"] == 20
    assert w["s_per_iter"] == 0.25
    assert w["samples_per_s"] == 20 * bench.MICROBATCH / 5.0
    # an epoch only one process reported (the run stopped early) is left out
    w = bench.window([fast, slow[:2]], first=2)
    assert w["epochs"] == 1 and w["seconds"] == 2.0
    with pytest.raises(ValueError, match="no epoch"):
        bench.window([fast], first=4)


def test_edgetrain_rows_read_the_runs_own_epoch_figures(bench: ModuleType, tmp_path: Path) -> None:
    rows = [
        {"event": "registered", "t": 0.1},
        {"event": "epoch", "epoch": 1, "epoch_s": 0.5, "epoch_steps": 89},
        {"event": "epoch", "epoch": 2, "epoch_s": 0.25, "epoch_steps": 89},
        {"event": "final", "steps": 178},
    ]
    (tmp_path / "worker-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "worker-1.jsonl").write_text(json.dumps({"event": "registered"}) + "\n")
    got = bench.edgetrain_rows(tmp_path)  # the evaluator-like worker with no epochs is skipped
    assert got == [[{"epoch": 1, "seconds": 0.5, "steps": 89},
                    {"epoch": 2, "seconds": 0.25, "steps": 89}]]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "technique", "role", "count"),
    [
        ("local", "local", "stage", 1),
        ("dataparallel", "dataparallel", "replica", 2),
        ("pipedream", "pipedream", "stage", 2),
    ],  # fmt: skip
)
def test_recipes_are_valid_and_the_same_training(
    bench: ModuleType, name: str, technique: str, role: str, count: int
) -> None:
    from edgetrain.recipe import parse_recipe

    data = tomllib.loads(bench.recipe_text(bench.SPECS[name], 7))
    recipe = parse_recipe(data)
    assert recipe.train.technique == technique and recipe.train.epochs == 7
    assert recipe.train.batch_size == bench.MICROBATCH and recipe.train.lr == bench.LR
    assert recipe.train.momentum == bench.MOMENTUM
    assert recipe.role_names() == [role] * count
    if technique == "pipedream":
        assert data["pipeline"]["split"] == list(bench.SPLIT)


def test_arguments(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    a = bench.parse_args([])
    assert (a.repeats, a.epochs, a.only) == (5, 10, list(bench.COMPARISONS))
    assert a.out == bench.DEFAULT_OUT
    q = bench.parse_args(["--quick", "--only", "local,pipedream"])
    assert (q.repeats, q.epochs, q.only) == (3, 6, ["local", "pipedream"])
    assert bench.parse_args(["--quick", "--repeats", "7"]).repeats == 7
    assert a.tree == bench.REPO
    bad_args = (["--only", "local,gpipe"], ["--repeats", "0"], ["--epochs", "1"], ["--tree", "/"])
    for bad in bad_args:
        with pytest.raises(SystemExit) as exc:
            bench.parse_args(bad)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown comparison 'gpipe'" in err and "at least 2" in err
    assert "holds no edgetrain package" in err
