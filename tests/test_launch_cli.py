"""``launch --run-dir`` into a run directory other commands filled, ``--events``, the summary's
runtime fields, ``edgetrain compare`` and ``edgetrain techniques``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli

RECIPE = """
[run]
name = "cmp"
seed = {seed}
checkpoint_every = 0
[data]
dataset = "digits"
[train]
family = "gossip"
technique = "gosgd"
epochs = 4
batch_size = 32
[[workers]]
count = 2
"""


def _launch(tmp_path: Path, seed: int, *args: str) -> subprocess.CompletedProcess[str]:
    recipe = tmp_path / f"r{seed}.toml"
    recipe.write_text(RECIPE.format(seed=seed))
    return subprocess.run(
        [sys.executable, "-m", "edgetrain", "launch", str(recipe), "--format", "json", *args],
        capture_output=True, text=True, timeout=200, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.timeout(300)
def test_launch_into_a_run_directory_then_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "exp" / "seed1"
    (first / "profiles").mkdir(parents=True)  # as `edgetrain profile --run-dir` leaves it
    (first / "profiles" / "host.json").write_text("{}")
    done = _launch(tmp_path, 1, "--run-dir", str(first), "--events", str(tmp_path / "ev.jsonl"))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["run"] == str(first) and (first / "profiles" / "host.json").is_file()
    # gosgd reads nothing of RUN: launch says the profile was ignored, in its output and manifest
    assert "ignores from the run directory: profiles/host.json (gossip/gosgd reads none" in (
        done.stderr
    )
    manifest = json.loads((first / "manifest.json").read_text())
    assert manifest["inputs"] == {"used": [], "ignored": ["profiles/host.json"]}
    assert (summary["family"], summary["technique"]) == ("gossip", "gosgd")
    assert [w["role"] for w in summary["workers"]] == ["trainer", "trainer"]
    assert 0 < summary["train_s"] < summary["wall_s"] and len(summary["model_sha256"]) == 64
    assert [p["epoch"] for p in summary["curve"]] == [1, 2, 3, 4]
    events = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    assert events[0] == {"event": "launch", "run_dir": str(first)}
    assert {"started", "barrier", "epoch", "averaged", "end"} <= {e["event"] for e in events}
    # a run directory holds one launched run
    again = _launch(tmp_path, 1, "--run-dir", str(first))
    assert again.returncode == 2 and "already holds a launched run" in again.stderr
    assert f"--resume {first}" in again.stderr
    both = _launch(tmp_path, 1, "--run-dir", str(first), "--runs-root", "x")
    assert both.returncode == 2 and "not both" in both.stderr

    second = _launch(tmp_path, 2, "--runs-root", str(tmp_path / "exp"))
    assert second.returncode == 0, second.stderr
    other = json.loads(second.stdout)["run"]
    assert Path(other).parent == tmp_path / "exp" and Path(other).name.startswith("cmp-")
    assert json.loads(second.stdout)["model_sha256"] != summary["model_sha256"]  # other seed

    plot = tmp_path / "cmp.png"
    code, out, err = run_cli(
        capsys, "compare", str(first), other, "--target-accuracy", "0.5", "--format", "json",
        "--plot", str(plot),
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["target_accuracy"] == 0.5 and result["baseline"] == str(first)
    rows = result["runs"]
    assert [r["seed"] for r in rows] == [1, 2] and rows[0]["speedup"] == 1.0
    for r in rows:
        assert r["time_to_target_s"] is not None and r["time_to_target_s"] <= r["train_s"]
        assert r["iterations"] > 0 and r["bytes_by_class"]["peer"] > 0
        assert r["bytes_by_class"]["control"] > 0 and 0.5 <= r["final_accuracy"] <= 1
    assert rows[1]["speedup"] == pytest.approx(
        rows[0]["time_to_target_s"] / rows[1]["time_to_target_s"]
    )
    assert plot.read_bytes()[:4] == b"\x89PNG"
    code, out, _ = run_cli(capsys, "compare", str(first), other)
    assert code == 0 and "speed-up" in out and "1.00x" in out


def test_compare_refuses_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "compare", str(tmp_path / "nope"))
    assert code == 2 and err.count("\n") == 1 and "not found" in err
    code, _, err = run_cli(capsys, "compare", str(tmp_path), "--target-accuracy", "97")
    assert code == 2 and err.count("\n") == 1 and "(0, 1]" in err


def test_techniques_lists_families_roles_and_sections(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "techniques")
    assert code == 0 and "gossip" in out and "gosgd" in out and "[gossip]" in out
    code, out, _ = run_cli(capsys, "techniques", "--format", "json")
    gossip = next(f for f in json.loads(out) if f["family"] == "gossip")
    assert gossip["techniques"][0]["roles"] == ["trainer"]
