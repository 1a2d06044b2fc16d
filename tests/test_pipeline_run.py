"""Pipeline runs end to end: three stage processes and an evaluator over ZeroMQ.

Each stage follows its fixed operation order, so timing cannot change the weights: mcPipe's
weights on demand train exactly PipeDream's model (one ``model_sha256``), GreedyUpdates'
newest-weight backwards train another; the report carries the per-stage table and the memory
figures; a lost stage stops the run with one line naming it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.helpers.cli import last_error
from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes

RECIPE = """
[run]
name = "{technique}"
seed = 2
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "pipeline"
technique = "{technique}"
epochs = {epochs}
batch_size = 16
lr = 0.05
[pipeline]
[[workers]]
role = "stage"
count = 3
[[workers]]
role = "evaluator"
count = 1
"""


def _recipe(tmp_path: Path, technique: str, epochs: int = 2) -> Path:
    path = tmp_path / f"{technique}.toml"
    path.write_text(RECIPE.format(technique=technique, epochs=epochs))
    return path


@pytest.mark.timeout(400)
def test_mcpipe_trains_pipedreams_weights_across_processes(tmp_path: Path) -> None:
    shas = {}
    for technique in ("pipedream", "mcpipe", "greedy"):
        launch = Launch(_recipe(tmp_path, technique), tmp_path / "runs")
        try:
            code, summary = launch.finish(timeout=150)
        finally:
            launch.kill()
        assert code == 0, launch.stderr
        assert summary is not None and summary["status"] == "completed"
        roles = [w["role"] for w in summary["workers"]]
        assert roles == ["stage", "stage", "stage", "evaluator"]
        assert summary["test_accuracy"] > 0.5
        shas[technique] = summary["model_sha256"]
        text = (launch.run_dir / "report" / "summary.md").read_text()
        assert "## Pipeline stages" in text and "resident" in text
    assert shas["mcpipe"] == shas["pipedream"]
    assert shas["greedy"] != shas["pipedream"]


@pytest.mark.timeout(240)
def test_a_lost_stage_stops_the_run_naming_it(tmp_path: Path) -> None:
    launch = Launch(_recipe(tmp_path, "mcpipe", epochs=100_000), tmp_path / "runs")
    try:
        launch.wait_event(lambda r: r.get("event") == "epoch", 120, "an epoch ends")
        manifest = launch.manifest()
        os.kill(launch.pids()[1], signal.SIGKILL)  # stage 1
        code, _ = launch.finish(timeout=120)
    finally:
        launch.kill()
    last = last_error(launch.stderr)
    assert code == 1, launch.stderr
    assert last.startswith("error: run failed: lost stage 1 (worker 1, host localhost): ")
    assert edgetrain_processes(manifest["run_id"]) == {}
