"""``security = "curve"`` through ``edgetrain launch``: an encrypted run, and missing keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.launching import Launch

RECIPE = """
[run]
name = "sec"
security = "curve"
keys = "{keys}"
checkpoint_every = 0
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
epochs = 3
batch_size = 32
[gossip]
probability = 0.5
[[workers]]
count = 2
"""


@pytest.mark.timeout(240)
def test_encrypted_run_completes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "keys", "generate", str(tmp_path / "keys"))
    assert code == 0, err
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(keys="keys"))  # relative to the current directory
    launch = Launch(recipe, tmp_path / "runs")  # runs in tmp_path, where keys/ is
    try:
        code, summary = launch.finish(timeout=200)
    finally:
        launch.kill()
    assert code == 0, launch.stderr
    assert summary is not None
    assert summary["status"] == "completed" and summary["averaged_test_accuracy"] > 0.8
    assert sum(w["gossip_merged"] for w in summary["workers"]) > 0  # peers talked, encrypted
    logs = sorted((tmp_path / "runs").glob("sec-*/logs/worker-0.log"))
    assert logs and "Traceback" not in logs[0].read_text()


def test_missing_keys_are_one_line_and_nothing_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(keys="nokeys"))
    code, _, err = run_cli(capsys, "launch", str(recipe), "--runs-root", "runs")
    assert code == 2
    assert err.count("\n") == 1 and "edgetrain keys generate" in err
    assert not (tmp_path / "runs").exists()
