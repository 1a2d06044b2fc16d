"""``edgetrain check`` (and ``launch --dry-run``): every problem listed, the placement printed,
nothing started or written; ``--set KEY=VALUE`` overrides for check and launch; shell
completion."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from edgetrain.errors import RecipeError
from edgetrain.recipe import apply_overrides
from edgetrain.tomlconfig import loads
from tests.helpers.cli import run_cli
from tests.helpers.launching import Launch

RECIPE = """
[run]
name = "chk"
checkpoint_every = 0
[data]
dataset = "digits"
[train]
family = "gossip"
technique = "gosgd"
epochs = 3
[[workers]]
count = 1
labels = ["fast"]
[[workers]]
count = 1
"""

HOSTS = """
[[hosts]]
name = "edge-a"
address = "10.0.0.1"
workers = 1
labels = {labels}
[[hosts]]
name = "edge-b"
address = "10.0.0.2"
workers = 1
"""


@pytest.fixture()
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh current directory holding the recipe (the default runs root is ./runs)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.toml").write_text(RECIPE)
    return tmp_path


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_check_prints_the_placement_and_writes_nothing(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "hosts.toml").write_text(HOSTS.format(labels='["fast"]'))
    before = _listing(here)
    # the labelled worker goes to edge-b only if its labels say so: here edge-a carries them
    code, out, err = run_cli(capsys, "check", "r.toml", "--hosts", "hosts.toml")
    assert code == 0, err
    assert "placement" in out and "ready to launch" in out and "not contacted" in out
    rows = [line.split() for line in out.splitlines() if "trainer" in line]
    assert rows == [["0", "trainer", "edge-a"], ["1", "trainer", "edge-b"]]

    code, out, err = run_cli(capsys, "check", "r.toml", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["ok"] is True and doc["problems"] == [] and doc["epochs"] == 3
    assert doc["workers"] == [
        {"worker": 0, "role": "trainer", "host": "local"},
        {"worker": 1, "role": "trainer", "host": "local"},
    ]
    # launch --dry-run is the same check, and --set reaches it
    code, out, err = run_cli(
        capsys, "launch", "r.toml", "--dry-run", "--set", "train.epochs=2", "--format", "json"
    )
    assert code == 0, err
    assert json.loads(out) == {**doc, "epochs": 2}
    assert not (here / "runs").exists()
    assert _listing(here) == before


def test_check_lists_every_problem(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "bad.toml").write_text(RECIPE.replace("epochs = 3", "epoch = 3\nbatch_size = 0"))
    code, out, err = run_cli(capsys, "check", "bad.toml")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "error: bad.toml: unknown key 'epoch' in [train]; did you mean 'epochs'?",
        "error: bad.toml: [train] batch_size: Input should be greater than or equal to 1 (got 0)",
    ]
    code, out, err = run_cli(capsys, "check", "bad.toml", "--format", "json")
    assert code == 2 and len(json.loads(out)["problems"]) == 2
    assert [json.loads(line)["error"] for line in err.splitlines()][1].endswith("(got 0)")
    # a launch still names the first, and nothing is written
    code, _, err = run_cli(capsys, "launch", "bad.toml")
    assert code == 2 and len(err.splitlines()) == 1 and "(and 1 more problem(s))" in err
    assert not (here / "runs").exists()


def test_check_names_a_role_the_hosts_labels_cannot_place(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "hosts.toml").write_text(HOSTS.format(labels='["slow"]'))
    code, out, err = run_cli(capsys, "check", "r.toml", "--hosts", "hosts.toml")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "error: worker 0 (trainer) needs a host labelled fast and no free slot has those "
        "labels; add the labels to a host in the hosts file, or drop `labels` from the recipe"
    ]
    assert not (here / "runs").exists()


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("train.epoch=2", "with --set train.epoch=2: unknown key 'epoch' in [train]; "
         "did you mean 'epochs'?"),
        ("train.epochs=0", "with --set train.epochs=0: [train] epochs: Input should be greater "
         "than or equal to 1 (got 0)"),
        ("train.epochs=many", "with --set train.epochs=many: [train] epochs: Input should be a "
         "valid integer"),
        ("train.epochs", "--set 'train.epochs': expected KEY=VALUE"),
        ("workers.3.count=2", "--set 'workers.3.count=2': 'workers' has no entry 3"),
        ("train.epochs.x=1", "--set 'train.epochs.x=1': 'train.epochs' is a value, not a table"),
    ],
)  # fmt: skip
def test_a_bad_set_is_one_line_and_nothing_is_written(
    here: Path, capsys: pytest.CaptureFixture[str], item: str, expected: str
) -> None:
    for command in ("launch", "check"):
        code, out, err = run_cli(capsys, command, "r.toml", "--set", item)
        assert code == 2 and out == "", (command, err)
        assert len(err.splitlines()) == 1 and expected in err, (command, err)
    assert not (here / "runs").exists()


def test_set_values_are_toml_values_or_bare_strings() -> None:
    data = {"train": {"epochs": 3}, "workers": [{"count": 1}, {"count": 2}]}
    out = apply_overrides(
        data,
        [
            "train.epochs=2",
            "train.lr=0.5",
            "data.max_samples=100",
            "ps.sync=true",
            'run.name="x y"',
            "run.keys=my-keys",
            "data.shape=[1, 8, 8]",
            "workers.2.slowdown=2.5",
        ],
    )
    assert out == {
        "train": {"epochs": 2, "lr": 0.5},
        "data": {"max_samples": 100, "shape": [1, 8, 8]},
        "ps": {"sync": True},
        "run": {"name": "x y", "keys": "my-keys"},
        "workers": [{"count": 1}, {"count": 2, "slowdown": 2.5}],
    }
    assert data["train"] == {"epochs": 3}  # the file's mapping is left alone
    with pytest.raises(RecipeError, match="is an array of 2 entries"):
        apply_overrides(data, ["workers.count=2"])


@pytest.mark.timeout(240)
def test_launch_with_set_runs_and_stores_the_overridden_recipe(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE)
    runs = tmp_path / "runs"
    launch = Launch(recipe, runs, "--set", "train.epochs=1", "--set", "run.name=over")
    try:
        code, summary = launch.finish(timeout=200)
    finally:
        launch.kill()
    assert code == 0, launch.stderr
    assert summary is not None and summary["status"] == "completed"
    assert [p["epoch"] for p in summary["curve"]] == [1]
    stored = launch.run_dir / "recipe.toml"
    assert launch.run_dir.name.startswith("over-")
    text = stored.read_text()
    assert text.startswith("#") and "--set train.epochs=1" in text.splitlines()[0]
    doc = loads(text)
    assert doc["train"]["epochs"] == 1 and doc["run"]["name"] == "over"
    assert doc["workers"] == loads(RECIPE)["workers"]


def test_shell_completion_is_on(capsys: pytest.CaptureFixture[str]) -> None:
    # the script as a user's shell gets it, from a process of its own whose parent is bash:
    # --show-completion is a flag, and Typer detects the shell from the parent processes (run
    # straight from pytest under a launcher that is no shell it said "Shell  not supported";
    # the command after it keeps bash from exec'ing into python)
    cmd = f"{shlex.quote(sys.executable)} -m edgetrain --show-completion; exit $?"
    done = subprocess.run(
        ["bash", "-c", cmd], capture_output=True, text=True, timeout=60, check=False
    )  # fmt: skip
    assert done.returncode == 0 and "_edgetrain_completion" in done.stdout, done.stderr
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "--install-completion" in out
