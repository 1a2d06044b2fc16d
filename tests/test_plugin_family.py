"""A new family plugs in through the registry alone (tests/helpers/toyfamily.py): its roles,
directives, peer traffic, hand-ins and final model work without touching comm/, launch/ or
worker/, and losing a worker of a role the run cannot lose stops it with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from edgetrain.rundir import read_jsonl
from tests.helpers.cli import last_error
from tests.helpers.launching import Launch
from tests.helpers.paths import REPO
from tests.helpers.procs import edgetrain_processes

RECIPE = """
[run]
name = "toy"
checkpoint_every = {checkpoint_every}
[data]
dataset = "digits"
[train]
family = "toy"
technique = "mean"
epochs = {epochs}
batch_size = 32
[toy]
tally_every = 1
[[workers]]
role = "keeper"
[[workers]]
count = 2
"""


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "EDGETRAIN_PLUGINS": "tests.helpers.toyfamily", "PYTHONPATH": path}


def _recipe(tmp_path: Path, epochs: int, checkpoint_every: int = 0) -> Path:
    path = tmp_path / "toy.toml"
    path.write_text(RECIPE.format(epochs=epochs, checkpoint_every=checkpoint_every))
    return path


def test_the_registry_lists_a_plugin_family() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "edgetrain", "techniques", "--format", "json"],
        capture_output=True, text=True, timeout=60, env=_env(), check=True,
    )  # fmt: skip
    families = {f["family"]: f for f in json.loads(out.stdout)}
    assert set(families) >= {"gossip", "toy"}
    toy = families["toy"]
    assert toy["roles"] == ["trainer", "keeper"] and toy["sections"] == ["toy"]
    assert toy["techniques"][0]["recipe"] == '[train] family = "toy", technique = "mean"'


@pytest.mark.timeout(180)
def test_a_plugin_family_trains_end_to_end(tmp_path: Path) -> None:
    launch = Launch(_recipe(tmp_path, epochs=3, checkpoint_every=2), tmp_path / "runs", env=_env())
    try:
        code, summary = launch.finish(timeout=150)
    finally:
        launch.kill()
    assert code == 0, launch.stderr
    assert summary is not None and summary["status"] == "completed"
    assert (summary["family"], summary["technique"]) == ("toy", "mean")
    assert [w["role"] for w in summary["workers"]] == ["keeper", "trainer", "trainer"]
    assert len(summary["model_sha256"]) == 64 and summary["test_accuracy"] > 0.5
    # the family's own report section, in summary.json and summary.md
    assert summary["technique_report"]["epochs_reported"] == {"0": 0, "1": 3, "2": 3}
    assert "toy epochs reported" in (launch.run_dir / "report" / "summary.md").read_text()
    rows = launch.rows
    model = [r for r in rows if r.get("event") == "final_model"]
    assert model and model[0]["trainers"] == 2 and model[0]["tallies"] == 2 * 3  # peer traffic
    finals = {r["worker"]: r for r in rows if r.get("event") == "final"}
    # every directive reached its worker: at start, at each barrier but the last, at drain
    for w in (1, 2):
        assert finals[w]["tags"] == [f"start-{w}", f"epoch-1-{w}", f"epoch-2-{w}", f"drain-{w}"]
    assert finals[0]["drain_tag"] == "drain-0"  # the keeper drains too
    # the checkpoint holds the trainers' parts only (the family's checkpoint roles)
    marker = json.loads(
        (launch.run_dir / "checkpoints" / "epoch-0002" / "checkpoint.json").read_text()
    )
    assert marker["family"] == "toy" and sorted(marker["workers"]) == ["1", "2"]
    assert marker["workers"]["1"]["role"] == "trainer:0"
    # the family's artifacts hook wrote one file per barrier into the run directory
    written = sorted(p.name for p in (launch.run_dir / "toy").iterdir())
    assert written == ["barrier-0001.json", "barrier-0002.json", "barrier-0003.json"]


@pytest.mark.timeout(180)
def test_losing_a_role_the_run_cannot_lose_stops_it_naming_it(tmp_path: Path) -> None:
    launch = Launch(_recipe(tmp_path, epochs=100_000), tmp_path / "runs", env=_env())
    try:
        launch.wait_event(
            lambda r: r.get("event") == "epoch" and r.get("worker") == 1, 120, "an epoch ends"
        )
        manifest = launch.manifest()
        os.kill(launch.pids()[0], signal.SIGKILL)  # worker 0 is keeper 0
        code, _ = launch.finish(timeout=60)
    finally:
        launch.kill()
    last = last_error(launch.stderr)
    assert code == 1
    assert last.startswith("error: run failed: lost keeper 0 (worker 0, host localhost): ")
    assert last.endswith("the run cannot go on without it")
    assert "was killed by SIGKILL" in last
    rows = read_jsonl(launch.run_dir / "metrics" / "worker-0.jsonl")
    assert rows[-1]["event"] == "failed"
    assert edgetrain_processes(manifest["run_id"]) == {}


def test_restart_is_refused_for_a_technique_whose_workers_cannot_rejoin(tmp_path: Path) -> None:
    """Every built-in technique takes lost workers back; the toy family's runner says nothing
    about rejoining, so ``[run] restart`` is refused for it in one line, exit 2."""
    recipe = _recipe(tmp_path, epochs=2)
    recipe.write_text("[run]\nrestart = 2\n" + recipe.read_text().replace("[run]\n", "", 1))
    out = subprocess.run(
        [sys.executable, "-m", "edgetrain", "check", str(recipe)],
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    line = last_error(out.stderr)
    assert "a restarted worker cannot rejoin a running toy/mean run yet" in line
    assert "Traceback" not in out.stderr
    recipe.write_text(recipe.read_text().replace("restart = 2\n", ""))  # unset: fine
    ok = subprocess.run(
        [sys.executable, "-m", "edgetrain", "check", str(recipe)],
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
