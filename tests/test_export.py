"""``edgetrain export RUN --to csv|tensorboard|mlflow`` and ``[report] tensorboard`` (issue 30),
on run directories written by hand: each export read back with the library's own reader (the
csv module, TensorBoard's EventAccumulator, MLflow's client), a resumed run's rows kept as the
summary keeps them, the run's live accuracy series, and every refusal in one line (exit 2)
with nothing written."""

from __future__ import annotations

import csv
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from edgetrain.errors import RecipeError
from edgetrain.recipe import parse_recipe
from edgetrain.report.scalars import RunMeans
from tests.helpers.cli import last_error, run_cli
from tests.helpers.paths import RECIPES
from tests.helpers.run_files import FIRST, SECOND, START, accuracy, loss, write_run


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _export(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "export", *argv, "--format", "json")
    assert code == 0, err
    return dict(json.loads(out))


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def test_csv_is_one_tidy_row_per_worker_and_epoch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path, workers=2, epochs=3)
    result = _export(capsys, str(run), "--to", "csv")
    out = run / "export" / "csv"
    assert result["out"] == str(out) and result["files"] == [
        "epochs.csv",
        "curve.csv",
        "summary.csv",
    ]
    assert result["rows"] == 6
    epochs = _rows(out / "epochs.csv")
    assert [(r["worker"], r["epoch"]) for r in epochs] == [
        (str(w), str(e)) for w in range(2) for e in (1, 2, 3)
    ]
    for r in epochs:
        w, e = int(r["worker"]), int(r["epoch"])
        assert r["run"] == run.name and r["run_id"] == FIRST
        assert (r["family"], r["technique"], r["role"], r["host"]) == (
            "gossip", "gosgd", "trainer", "localhost",
        )  # fmt: skip
        assert float(r["loss"]) == loss(w, e) and float(r["test_accuracy"]) == accuracy(w, e)
        assert int(r["steps"]) == 10 * e and float(r["epoch_s"]) == 0.5
        assert r["train_accuracy"] == ""  # not reported: an empty cell
    # the run's curve: the mean of the workers' accuracies, training time without evaluation
    curve = _rows(out / "curve.csv")
    assert [int(r["epoch"]) for r in curve] == [1, 2, 3]
    assert float(curve[2]["test_accuracy"]) == pytest.approx((accuracy(0, 3) + accuracy(1, 3)) / 2)
    assert [r["train_s"] for r in curve] == [r["train_s"] for r in epochs[:3]]
    (summary,) = _rows(out / "summary.csv")
    assert summary["status"] == "completed" and float(summary["test_accuracy"]) == 0.91
    assert summary["model_file_sha256"] == "e" * 64 and summary["workers"] == "2"
    assert not list(out.parent.glob(".*tmp*"))  # no temporary directory left


def test_a_resumed_run_keeps_the_rows_of_the_attempt_that_replaced_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first attempt ran epochs 1-3; the second resumed from epoch 1's checkpoint."""
    run = write_run(tmp_path, workers=2, epochs=3, resumed=1)
    _export(capsys, str(run), "--to", "csv", "--out", str(tmp_path / "out"))
    epochs = _rows(tmp_path / "out" / "epochs.csv")
    got = [(r["worker"], r["epoch"], r["run_id"], float(r["loss"])) for r in epochs]
    assert got == [
        (str(w), str(e), FIRST if e == 1 else SECOND, loss(w, e, 0 if e == 1 else 1))
        for w in range(2)
        for e in (1, 2, 3)
    ]


def test_tensorboard_export_reads_back_with_tensorboards_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = write_run(tmp_path, workers=2, epochs=3)
    out = tmp_path / "tb" / "fake"
    result = _export(capsys, str(run), "--to", "tensorboard", "--out", str(out))
    assert len(result["files"]) == 1 and result["files"][0].startswith("events.out.tfevents")
    acc = EventAccumulator(str(out))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for w in range(2):
        assert {f"worker-{w}/{k}" for k in ("loss", "test_accuracy", "steps", "epoch_s")} <= tags
        points = acc.Scalars(f"worker-{w}/loss")
        assert [p.step for p in points] == [1, 2, 3]
        assert [p.value for p in points] == pytest.approx([loss(w, e) for e in (1, 2, 3)])
    run_acc = acc.Scalars("run/test_accuracy")
    assert [p.step for p in run_acc] == [1, 2, 3]
    assert run_acc[-1].value == pytest.approx((accuracy(0, 3) + accuracy(1, 3)) / 2)
    assert [p.step for p in acc.Scalars("run/train_s")] == [1, 2, 3]
    (final,) = acc.Scalars("run/final_test_accuracy")
    assert (final.step, final.value) == (3, pytest.approx(0.91))
    # wall times are the run's own (the manifest's start plus each row's t), not the export's
    first = acc.Scalars("worker-0/loss")[0]
    assert first.wall_time == pytest.approx(datetime.fromisoformat(START).timestamp() + 2.0)


def _mlflow_client(store: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads file stores with it
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    return MlflowClient(tracking_uri=store.resolve().as_uri())


def test_mlflow_export_reads_back_with_mlflows_client(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "mlruns"
    client = _mlflow_client(store, monkeypatch)
    first = write_run(tmp_path / "a", workers=2, epochs=3)
    second = write_run(tmp_path / "b", workers=2, epochs=3, resumed=1)
    result = _export(capsys, str(first), "--to", "mlflow", "--out", str(store))
    assert result["experiment"] == "fake" and result["tracking_uri"].startswith("file:")
    _export(capsys, str(second), "--to", "mlflow", "--out", str(store))  # a store gathers runs
    experiment = client.get_experiment_by_name("fake")
    runs = client.search_runs([experiment.experiment_id], f"tags.`edgetrain.run_id` = '{FIRST}'")
    assert [r.info.run_id for r in runs] == [result["mlflow_run_id"]]
    got = client.get_run(result["mlflow_run_id"])
    assert got.info.run_name == first.name and got.info.status == "FINISHED"
    assert got.data.tags["edgetrain.status"] == "completed"
    params = got.data.params
    assert params["train.lr"] == "0.05" and params["train.technique"] == "gosgd"
    assert params["model.options.hidden"] == "[16]" and params["workers.1.count"] == "2"
    assert params["gossip.probability"] == "0.25"
    assert not any(k.startswith("dlion.") for k in params)  # a section gosgd does not read
    history = client.get_metric_history(got.info.run_id, "worker-1/test_accuracy")
    assert [m.step for m in history] == [1, 2, 3]
    assert [m.value for m in history] == pytest.approx([accuracy(1, e) for e in (1, 2, 3)])
    assert [m.step for m in client.get_metric_history(got.info.run_id, "run/train_s")] == [1, 2, 3]
    assert got.data.metrics["test_accuracy"] == pytest.approx(0.91)
    assert got.data.metrics["iterations"] == 60
    artifacts = {a.path for a in client.list_artifacts(got.info.run_id)}
    assert "recipe.toml" in artifacts
    assert len(client.search_runs([experiment.experiment_id])) == 2
    # the same run again would be a second copy: refused, the store unchanged
    before = _tree(store)
    code, _, err = run_cli(capsys, "export", str(first), "--to", "mlflow", "--out", str(store))
    assert code == 2 and "already holds run" in last_error(err)
    assert _tree(store) == before


def _nonempty(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "keep.txt").write_text("mine")
    return path


@pytest.mark.parametrize(
    ("case", "argv", "says"),
    [
        ("no run", ["{tmp}/missing", "--to", "csv"], "run directory '{tmp}/missing' not found"),
        ("not empty", ["{run}", "--to", "csv", "--out", "{full}"], "is not empty"),
        ("a file", ["{run}", "--to", "tensorboard", "--out", "{file}"], "is a file"),
        ("no store", ["{run}", "--to", "mlflow", "--out", "{full}"], "neither empty nor an MLflow"),
        ("no target", ["{run}", "--to", "wandb"], "'wandb' is not one of"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, argv: list[str], says: str
) -> None:
    run = write_run(tmp_path)
    full = _nonempty(tmp_path / "full")
    (tmp_path / "file").write_text("x")
    names = {
        "tmp": str(tmp_path),
        "run": str(run),
        "full": str(full),
        "file": str(tmp_path / "file"),
    }
    before = _tree(tmp_path)
    code, out, err = run_cli(capsys, "export", *[a.format(**names) for a in argv])
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert says.format(**names) in err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(("target", "module", "package"), [
    ("tensorboard", "tensorboard", "tensorboard"),
    ("mlflow", "mlflow", "mlflow-skinny"),
])  # fmt: skip
def test_a_missing_package_is_named_with_its_install_command(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    module: str,
    package: str,
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    run = write_run(tmp_path)
    before = _tree(tmp_path)
    code, _, err = run_cli(capsys, "export", str(run), "--to", target)
    assert code == 2
    assert last_error(err) == (
        f"error: edgetrain export --to {target} needs the {package} package, which is not "
        f"installed; install it with: pip install {package} (or pip install -e "
        f"'.[{module}]' in a clone of edgetrain)"
    )
    assert _tree(tmp_path) == before


def test_check_and_launch_refuse_tensorboard_without_the_package_and_start_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.chdir(tmp_path)
    recipe = str(RECIPES / "quickstart.toml")
    for argv in (["check", recipe], ["launch", recipe, "--runs-root", "runs"]):
        code, _, err = run_cli(capsys, *argv, "--set", "report.tensorboard=true")
        assert code == 2, err
        assert last_error(err).startswith(
            "error: [report] tensorboard = true needs the tensorboard package, which is not "
            "installed; install it with: pip install tensorboard"
        )
    assert list(tmp_path.iterdir()) == []  # no run directory, nothing written


def test_the_report_section_is_checked_like_every_section() -> None:
    base = {"workers": [{"count": 2}]}
    assert parse_recipe(base).report.tensorboard is False
    assert parse_recipe({**base, "report": {"tensorboard": True}}).report.tensorboard is True
    with pytest.raises(RecipeError, match="did you mean 'tensorboard'"):
        parse_recipe({**base, "report": {"tensorbord": True}})


def _row(worker: int, epoch: int, acc: float | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"event": "epoch", "worker": worker, "epoch": epoch}
    if acc is not None:
        row["test_accuracy"] = acc
    return row


def test_the_live_run_accuracy_waits_for_every_worker_and_writes_each_epoch_once() -> None:
    live = RunMeans([0, 1, 2])
    assert live.add(_row(0, 1, 0.5)) == [] and live.add(_row(1, 1, 0.7)) == []
    assert live.add(_row(0, 2, 0.8)) == []  # worker 2 has not ended epoch 1
    (point,) = live.add(_row(2, 1, 0.9))
    assert (point.tag, point.step, point.value) == ("run/test_accuracy", 1, pytest.approx(0.7))
    assert live.add({"event": "failed", "worker": 2}) == []  # epoch 2 waits for worker 1 only
    (point,) = live.add(_row(1, 2, 0.6))
    assert (point.step, point.value) == (2, pytest.approx(0.7))
    assert live.add(_row(0, 3)) == []  # not evaluated: nothing to write
    assert live.add(_row(0, 4, 0.95)) == []
    (point,) = live.flush()  # the run ended: what is left, in order
    assert (point.step, point.value) == (4, pytest.approx(0.95))
    assert live.flush() == [] and live.last_epoch == 4


def test_help_shows_examples(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "export", "--help")
    assert code == 0
    assert "edgetrain export runs/quickstart-20261122-101500 --to csv" in out
    assert "--to mlflow --out mlruns" in out
