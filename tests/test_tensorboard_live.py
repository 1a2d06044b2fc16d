"""``[report] tensorboard = true`` on a real run (issue 30): recipes/quickstart.toml for two
epochs writes TensorBoard event files while it goes, which TensorBoard's own reader reads back
as the run's metrics; ``edgetrain export`` of the same run gives the same series, to
TensorBoard, MLflow (its client reads the file store) and CSV."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from edgetrain.comm.control import Event
from edgetrain.launch.tensorboard_sink import FLUSH_S, TensorBoardSink
from edgetrain.rundir import read_jsonl
from tests.helpers.cli import run_cli
from tests.helpers.launching import completed
from tests.helpers.paths import RECIPES
from tests.helpers.waiting import wait_until

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

EPOCHS = 2
WORKERS = 4


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A completed quickstart run with TensorBoard on: its directory and summary."""
    tmp = tmp_path_factory.mktemp("live")
    recipe = tmp / "quickstart.toml"
    text = (RECIPES / "quickstart.toml").read_text().replace("epochs = 30", f"epochs = {EPOCHS}")
    recipe.write_text(text + "\n[report]\ntensorboard = true\n")
    launch, summary = completed(recipe, tmp / "runs", timeout=200)
    return launch.run_dir, summary


def _scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {t: [(s.step, s.value) for s in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def _epoch_rows(run: Path, worker: int) -> list[dict[str, Any]]:
    return [
        r for r in read_jsonl(run / "metrics" / f"worker-{worker}.jsonl") if r["event"] == "epoch"
    ]


@pytest.mark.timeout(300)
def test_the_launch_writes_event_files_tensorboard_reads_back(
    run: tuple[Path, dict[str, Any]],
) -> None:
    path, summary = run
    series = _scalars(path / "tensorboard")
    for w in range(WORKERS):
        rows = _epoch_rows(path, w)
        for key in ("loss", "test_accuracy", "test_loss", "steps"):
            got = series[f"worker-{w}/{key}"]
            assert [step for step, _ in got] == list(range(1, EPOCHS + 1))
            assert [v for _, v in got] == pytest.approx([r[key] for r in rows], rel=1e-6)
    curve = summary["curve"]
    for key in ("test_accuracy", "loss", "test_loss"):  # the run's means: the summary's curve
        assert series[f"run/{key}"] == [
            (p["epoch"], pytest.approx(p[key], rel=1e-6)) for p in curve
        ]
    assert series["run/final_test_accuracy"] == [(EPOCHS, pytest.approx(summary["test_accuracy"]))]


@pytest.mark.timeout(300)
def test_export_gives_the_same_series_to_tensorboard_mlflow_and_csv(
    run: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, summary = run
    live = _scalars(path / "tensorboard")
    code, _, err = run_cli(
        capsys, "export", str(path), "--to", "tensorboard", "--out", str(tmp_path / "tb")
    )
    assert code == 0, err
    exported = _scalars(tmp_path / "tb")
    assert set(exported) == set(live) | {"run/train_s"}
    for tag, points in live.items():
        assert exported[tag] == [(s, pytest.approx(v, rel=1e-6)) for s, v in points], tag
    train_s = [(p["epoch"], pytest.approx(p["train_s"], rel=1e-6)) for p in summary["curve"]]
    assert exported["run/train_s"] == train_s

    code, _, err = run_cli(
        capsys, "export", str(path), "--to", "csv", "--out", str(tmp_path / "csv")
    )
    assert code == 0, err
    with (tmp_path / "csv" / "epochs.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == WORKERS * EPOCHS
    assert {float(r["loss"]) for r in rows if r["worker"] == "0"} == {
        r["loss"] for r in _epoch_rows(path, 0)
    }

    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    store = tmp_path / "mlruns"
    code, out, err = run_cli(
        capsys, "export", str(path), "--to", "mlflow", "--out", str(store), "--format", "json"
    )
    assert code == 0, err
    result = json.loads(out)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    client = MlflowClient(tracking_uri=result["tracking_uri"])
    got = client.get_run(result["mlflow_run_id"])
    assert got.info.status == "FINISHED" and got.data.params["train.epochs"] == str(EPOCHS)
    assert got.data.metrics["test_accuracy"] == pytest.approx(summary["test_accuracy"])
    for tag, points in live.items():
        history = client.get_metric_history(got.info.run_id, tag)
        assert [(m.step, m.value) for m in history] == [
            (s, pytest.approx(v, rel=1e-6)) for s, v in points
        ], tag
    assert "model" in {a.path for a in client.list_artifacts(got.info.run_id)}


def _epoch(worker: int, epoch: int) -> Event:
    data = {"loss": 1.0 / epoch, "test_accuracy": 0.5 + 0.1 * epoch + 0.01 * worker}
    return Event(worker, "epoch", {**data, "epoch": epoch, "steps": 10 * epoch})


def _both_epochs(folder: Path) -> dict[str, list[tuple[int, float]]] | None:
    """The scalars once worker 0's two epochs and the run's first are in the files (a flush
    can land between two of them)."""
    s = _scalars(folder)
    return s if len(s.get("worker-0/loss", [])) == 2 and s.get("run/test_accuracy") else None


def test_the_sink_writes_while_the_run_goes_not_only_at_its_end(tmp_path: Path) -> None:
    sink = TensorBoardSink(tmp_path / "tb", [0, 1])
    sink.on_event(Event(None, "started", {"workers": 2}), 0.0)
    for event in (_epoch(0, 1), _epoch(1, 1), _epoch(0, 2)):
        sink.on_event(event, 1.0)
    # no end yet: the files are flushed every few seconds while the run goes
    series = wait_until(
        lambda: _both_epochs(tmp_path / "tb"),
        10 * FLUSH_S,
        "the epochs reach the event file before the run ends",
    )
    assert [step for step, _ in series["worker-0/loss"]] == [1, 2]
    assert series["run/test_accuracy"] == [(1, pytest.approx(0.605))]  # epoch 2: worker 1 due
    sink.on_event(Event(None, "end", {"status": "completed"}), 2.0)
    assert _scalars(tmp_path / "tb")["run/test_accuracy"] == [
        (1, pytest.approx(0.605)),
        (2, pytest.approx(0.7)),  # the run ended: what is left, worker 0's alone
    ]


def test_a_resumed_runs_points_replace_those_of_the_epochs_it_trains_again(
    tmp_path: Path,
) -> None:
    first = TensorBoardSink(tmp_path, [0])
    for epoch in (1, 2, 3):
        first.on_event(_epoch(0, epoch), 1.0)
    first.on_event(Event(None, "end", {"status": "interrupted"}), 2.0)
    again = TensorBoardSink(tmp_path, [0], purge_step=3)  # resumed from epoch 2's checkpoint
    again.on_event(Event(0, "epoch", {"loss": 9.0, "epoch": 3}), 1.0)
    again.on_event(Event(None, "end", {"status": "completed"}), 2.0)
    assert len(list(tmp_path.iterdir())) == 2  # a file per attempt
    assert _scalars(tmp_path)["worker-0/loss"] == [(1, 1.0), (2, 0.5), (3, 9.0)]


def test_a_sink_that_cannot_write_logs_once_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "tensorboard"
    blocked.write_text("a file where the directory should be")
    sink = TensorBoardSink(blocked, [0])
    for epoch in (1, 2):
        sink.on_event(_epoch(0, epoch), 1.0)  # raises nothing
    sink.on_event(Event(None, "end", {"status": "completed"}), 2.0)
    warnings = [r for r in caplog.records if "TensorBoard files" in r.getMessage()]
    assert len(warnings) == 1 and "no more are written" in warnings[0].getMessage()
