"""End to end: real worker processes gossiping over ZeroMQ on 127.0.0.1, and Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgetrain.rundir import read_jsonl
from tests.helpers.cli import last_error
from tests.helpers.final_model import assert_final_model
from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes
from tests.helpers.waiting import wait_until

RECIPE = """
[run]
name = "{name}"
seed = 1
[data]
dataset = "digits"
partition = "{partition}"
[model]
name = "mlp"
[train]
epochs = {epochs}
batch_size = 16
lr = 0.05
[gossip]
probability = 0.3
[[workers]]
count = 2
[[workers]]
count = 1
slowdown = {slowdown}
"""


def _recipe(tmp_path: Path, **kw: object) -> Path:
    values = {"name": "t", "partition": "iid", "epochs": 12, "slowdown": 2.0, **kw}
    path = tmp_path / "recipe.toml"
    path.write_text(RECIPE.format(**values))
    return path


def _launch(recipe: Path, runs: Path, **popen: object) -> Launch:
    return Launch(recipe, runs, **popen)


def _only_run(runs: Path) -> Path:
    dirs = [p for p in runs.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.mark.timeout(240)
def test_three_workers_gossip_on_digits(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    launch = _launch(_recipe(tmp_path), runs)
    try:
        code, summary = launch.finish(timeout=200)
    finally:
        launch.kill()
    assert code == 0, launch.stderr
    assert summary is not None
    run = _only_run(runs)
    assert summary["status"] == "completed"
    assert summary["averaged_test_accuracy"] >= 0.9
    assert [w["status"] for w in summary["workers"]] == ["completed"] * 3
    assert all(w["final_test_accuracy"] > 0.8 for w in summary["workers"])
    assert all(w["steps"] > 0 and w["bytes_sent"] > 0 for w in summary["workers"])
    assert sum(w["gossip_merged"] for w in summary["workers"]) > 0
    # the run directory holds every artifact the design names
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["end_time"]
    assert manifest["recipe"]["train"]["epochs"] == 12 and manifest["versions"]["torch"]
    assert (run / "recipe.toml").read_text().startswith("\n[run]")
    for i in range(3):
        epochs = [
            e for e in read_jsonl(run / "metrics" / f"worker-{i}.jsonl") if e["event"] == "epoch"
        ]
        assert [e["epoch"] for e in epochs] == list(range(1, 13))
        assert (run / "logs" / f"worker-{i}.log").is_file()
    averaged = [
        e for e in read_jsonl(run / "metrics" / "coordinator.jsonl") if e["event"] == "averaged"
    ]
    assert math.isclose(averaged[0]["alpha_sum"], 1.0, rel_tol=1e-9)  # no gossip mass lost
    on_disk = json.loads((run / "report" / "summary.json").read_text())
    assert on_disk["averaged_test_accuracy"] == summary["averaged_test_accuracy"]
    for key in ("status", "wall_s", "averaged_test_accuracy", "workers"):
        assert key in on_disk
    for key in (
        "id",
        "host",
        "final_test_accuracy",
        "steps",
        "bytes_sent",
        "bytes_received",
        "status",
    ):
        assert key in on_disk["workers"][0]
    assert (run / "report" / "summary.md").is_file()
    assert (run / "report" / "accuracy.png").read_bytes()[:4] == b"\x89PNG"
    assert_final_model(run, summary)  # model/final.safetensors loads in plain PyTorch
    assert edgetrain_processes(manifest["run_id"]) == {}
    # `edgetrain report` rebuilds the same summary from the run directory alone
    (run / "report" / "summary.json").unlink()
    rep = subprocess.run(
        [sys.executable, "-m", "edgetrain", "report", str(run), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(rep.stdout)["workers"] == summary["workers"]
    assert json.loads(rep.stdout)["model_sha256"] == summary["model_sha256"]
    assert (run / "report" / "summary.json").is_file()
    # ... with the loss plot and the loss in every point of its curve (issue 30)
    assert (run / "report" / "loss.png").read_bytes()[:4] == b"\x89PNG"
    curve = json.loads(rep.stdout)["curve"]
    assert [p["epoch"] for p in curve] == list(range(1, 13))
    assert all(isinstance(p["loss"], float) and p["loss"] > 0 for p in curve)


def _wait_gone(run_id: str, timeout: float = 30) -> None:
    wait_until(lambda: not edgetrain_processes(run_id), timeout, "every worker process exits")


@contextlib.contextmanager
def _long_run(tmp_path: Path) -> Iterator[tuple[Launch, Path, str, dict[int, int]]]:
    """A long 3-worker run, in training; the launcher is always reaped afterwards."""
    launch = _launch(_recipe(tmp_path, epochs=100_000, slowdown=3.0), tmp_path / "runs")
    try:
        launch.wait_epochs(3)
        manifest = launch.manifest()
        yield launch, launch.run_dir, manifest["run_id"], launch.pids()
    finally:
        launch.kill()


@pytest.mark.timeout(240)
def test_ctrl_c_stops_every_process_and_marks_the_run(tmp_path: Path) -> None:
    with _long_run(tmp_path) as (launch, run, run_id, _):
        assert len(edgetrain_processes(run_id)) == 3
        launch.signal(signal.SIGINT)  # what a terminal's Ctrl-C does
        code, _ = launch.finish(timeout=60)
    err = launch.stderr
    assert code == 130, err
    assert "Traceback" not in err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["end_time"]
    assert {w["status"] for w in manifest["workers"]} == {"interrupted"}
    assert edgetrain_processes(run_id) == {}
    assert json.loads((run / "report" / "summary.json").read_text())["status"] == "interrupted"


@pytest.mark.timeout(240)
def test_a_dead_worker_fails_the_run_cleanly(tmp_path: Path) -> None:
    with _long_run(tmp_path) as (launch, run, run_id, pids):
        os.kill(pids[1], signal.SIGKILL)
        code, _ = launch.finish(timeout=60)
    err = launch.stderr
    assert code == 1
    last = last_error(err)  # 1 of 3 is above the default max_failed_fraction
    assert last.startswith("error: run failed: 1 of 3 workers failed (33% > max_failed_fraction")
    assert "worker 1 (host localhost): was killed by SIGKILL" in last
    assert "was killed by SIGKILL" in err and "Traceback" not in err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "worker 1" in manifest["error"]
    assert [w["status"] for w in manifest["workers"]] == ["incomplete", "failed", "incomplete"]
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["workers"][0]["steps"] > 0  # kept
    assert edgetrain_processes(run_id) == {}


@pytest.mark.timeout(240)
def test_workers_exit_when_the_launcher_is_killed(tmp_path: Path) -> None:
    with _long_run(tmp_path) as (launch, _, run_id, _):
        launch.proc.kill()  # SIGKILL: no clean-up code runs in the launcher
        launch.proc.wait(timeout=30)
        _wait_gone(run_id)  # each worker sees its stdin close and exits by itself
