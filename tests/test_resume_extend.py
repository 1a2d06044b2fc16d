"""``launch --resume`` never loses a completed result: a completed run is refused unless
``--epochs N`` extends it, and then its earlier result is kept in ``RUN/attempts/<n>/``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgetrain.rundir import read_jsonl
from tests.helpers.cli import run_cli

RECIPE = """
[run]
name = "x"
seed = 1
checkpoint_every = 1
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
epochs = {epochs}
batch_size = 32
[[workers]]
count = 2
"""


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _completed_run(tmp_path: Path, epochs: int = 2) -> Path:
    """A run directory as a completed launch leaves it (no worker needed to refuse it)."""
    run = tmp_path / "runs" / "done"
    (run / "report").mkdir(parents=True)
    (run / "metrics").mkdir()
    (run / "recipe.toml").write_text(RECIPE.format(epochs=epochs))
    (run / "manifest.json").write_text(json.dumps({"run_id": "a", "status": "completed"}))
    (run / "report" / "summary.json").write_text(json.dumps({"model_sha256": "abc"}))
    return run


def test_a_completed_run_is_not_resumed_without_epochs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _completed_run(tmp_path)
    before = _files(run)
    code, out, err = run_cli(capsys, "launch", "--resume", str(run))
    assert code == 2, err
    assert err.strip().count("\n") == 0 and "Traceback" not in err
    assert "already completed its 2 epochs" in err and "--epochs N with N > 2" in err
    assert _files(run) == before


@pytest.mark.parametrize("epochs", ["2", "1", "0"])
def test_epochs_not_above_the_completed_ones_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], epochs: str
) -> None:
    run = _completed_run(tmp_path)
    before = _files(run)
    code, _, err = run_cli(capsys, "launch", "--resume", str(run), "--epochs", epochs)
    assert code == 2, err
    assert err.strip().count("\n") == 0 and "Traceback" not in err
    assert f"--epochs {epochs}" in err and ("N > 2" in err or "N > 0" in err)
    assert _files(run) == before


def test_epochs_without_resume_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(epochs=2))
    code, _, err = run_cli(
        capsys, "launch", str(recipe), "--run-dir", str(tmp_path / "r"), "--epochs", "3"
    )
    assert code == 2
    assert err.strip().count("\n") == 0 and "needs --resume RUN" in err
    assert not (tmp_path / "r").exists()


def _launch(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgetrain", "launch", *argv, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.timeout(600)
def test_epochs_extends_a_completed_run_and_keeps_its_result(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(epochs=2))
    run = tmp_path / "run"
    first = _launch(str(recipe), "--run-dir", str(run))
    assert first.returncode == 0, first.stderr
    old_summary = (run / "report" / "summary.json").read_bytes()
    old_manifest = (run / "manifest.json").read_bytes()
    old_model = (run / "model" / "final.safetensors").read_bytes()
    assert json.loads(old_manifest)["status"] == "completed"

    refused = _launch("--resume", str(run))
    assert refused.returncode == 2 and "already completed its 2 epochs" in refused.stderr
    assert (run / "report" / "summary.json").read_bytes() == old_summary

    extended = _launch("--resume", str(run), "--epochs", "3")
    assert extended.returncode == 0, extended.stderr
    assert "kept the completed result" in extended.stderr
    summary = json.loads(extended.stdout)
    assert summary["status"] == "completed"
    kept = run / "attempts" / "1"
    assert (kept / "report" / "summary.json").read_bytes() == old_summary
    assert (kept / "manifest.json").read_bytes() == old_manifest
    assert (kept / "model" / "final.safetensors").read_bytes() == old_model
    assert (run / "model" / "final.safetensors").read_bytes() != old_model  # the extended run's
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["extended_epochs"] == 3 and manifest["recipe"]["train"]["epochs"] == 3
    assert manifest["attempts"][0]["status"] == "completed"
    assert manifest["attempts"][0]["kept_in"] == "attempts/1"
    epochs = [
        r["epoch"] for r in read_jsonl(run / "metrics" / "worker-0.jsonl") if r["event"] == "epoch"
    ]
    assert epochs[-2:] == [2, 3]  # from the checkpoint of epoch 1 up to 3

    again = _launch("--resume", str(run))  # now it completed 3 epochs
    assert again.returncode == 2 and "already completed its 3 epochs" in again.stderr
