"""``edgetrain status RUN`` says per worker what it is doing and, while it waits, on whom, for
what and for how long: the record heartbeats carry (pure, against literal values), the file the
launcher writes, and a live pipeline whose stage 1 stalls while stage 0 waits on it."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from edgetrain.cli.runs_cmd import doing_text
from edgetrain.comm import activity
from edgetrain.launch.activity_file import activity_doc
from tests.helpers.cli import run_cli
from tests.helpers.launching import Launch
from tests.helpers.paths import REPO


def test_the_record_a_heartbeat_carries() -> None:
    activity.set_phase("training")
    assert activity.snapshot() == {"phase": "training"}
    with activity.waiting("worker 2", "grad of iteration 7"):
        with activity.waiting("coordinator", "the epoch barrier"):
            inner = activity.snapshot(now=time.monotonic() + 3.0)
        outer = activity.snapshot()
    assert inner["on"] == "coordinator" and inner["for_s"] >= 3.0  # the outer wait's start
    assert outer["on"] == "worker 2" and outer["what"] == "grad of iteration 7"
    assert activity.snapshot() == {"phase": "training"}
    activity.set_phase("setup")


def test_nothing_from_the_network_is_taken_whole() -> None:
    assert activity.parse({"phase": "x" * 500})["phase"] == "x" * activity.MAX_TEXT
    assert activity.parse({"phase": "t", "on": "w1", "what": "g", "for_s": 2}) == {
        "phase": "t", "on": "w1", "what": "g", "for_s": 2.0,
    }  # fmt: skip
    for bad in (None, [], {"phase": 3}, "training"):
        assert activity.parse(bad) is None
    for seconds in (-1, float("nan"), True, "2", 1e9):
        assert activity.parse({"phase": "t", "on": "w", "what": "g", "for_s": seconds}) == {
            "phase": "t"
        }


def test_the_file_and_the_column() -> None:
    info = SimpleNamespace(activity={"phase": "training", "on": "stage 1", "what": "g",
                                     "for_s": 2.0}, activity_at=100.0)  # fmt: skip
    silent = SimpleNamespace(activity=None, activity_at=None)
    doc = activity_doc({0: info, 1: silent}, now=101.5)
    assert doc == {"t": 101.5, "workers": {"0": {**info.activity, "heard_s_ago": 1.5}}}
    assert doing_text({"phase": "training", "on": "stage 1", "what": "g", "for_s": 12.0}) == (
        "training: waiting 12.0 s on stage 1 (g)"
    )
    assert doing_text({"phase": "draining"}) == "draining"
    assert doing_text(None) == "-"


RECIPE = """
[run]
name = "stall"
seed = 0
heartbeat_s = 0.5
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "pipeline"
technique = "pipedream"
epochs = 400
batch_size = 16
lr = 0.05
[pipeline]
split = [2, 1]
[[workers]]
role = "stage"
count = 2
"""


@pytest.mark.timeout(240)
def test_status_shows_who_waits_on_whom(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "EDGETRAIN_PLUGINS": "tests.helpers.stall", "PYTHONPATH": path,
           "EDGETRAIN_TEST_STALL_S": "30"}  # fmt: skip
    launch = Launch(recipe, tmp_path / "runs", env=env)
    try:
        launch.wait_epochs(2)
        os.kill(launch.pids()[1], signal.SIGUSR2)  # stage 1 stalls, its heartbeats go on
        deadline = time.monotonic() + 60
        seen: dict = {}
        while time.monotonic() < deadline:
            code, out, err = run_cli(capsys, "status", str(launch.run_dir), "--format", "json")
            assert code == 0, err
            seen = {w["id"]: w.get("doing") for w in json.loads(out)["workers"]}
            stage0 = seen.get(0) or {}
            if stage0.get("on") == "stage 1" and stage0.get("for_s", 0) >= 2:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"status never showed stage 0 waiting on stage 1: {seen}")
        assert "from w1" in stage0["what"] or "microbatch" in stage0["what"], stage0
        # stage 1's heartbeats go on (its stall may land inside its own wait for stage 0)
        assert seen[1] is not None and seen[1]["phase"] == "training"
        assert seen[1]["heard_s_ago"] < 5
        code, out, _ = run_cli(capsys, "status", str(launch.run_dir))
        assert "waiting" in out and "on stage 1" in out
    finally:
        launch.kill()
