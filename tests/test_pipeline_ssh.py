"""A pipeline over ssh: two mcPipe stages and an evaluator on three hosts of a real OpenSSH
server on 127.0.0.1 (``launch --hosts``), against the same recipe on local processes. Every
stage follows its fixed operation order, so the hosts and links cannot change the weights:
both runs (and the in-process simulator) train one ``model_sha256``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from reproductions.mcpipe_sim import simulated_sha
from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes
from tests.helpers.sshd import Sshd, sshd  # noqa: F401 - the fixture

VENV = Path(sys.executable).parent.parent

RECIPE = """
[run]
name = "ssh-pipeline"
seed = {seed}
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "pipeline"
technique = "mcpipe"
epochs = 2
batch_size = 16
lr = 0.05
momentum = 0
[pipeline]
split = [1, 2]
window_extra = 1
snapshot_every = 50
[[workers]]
role = "stage"
count = 2
[[workers]]
role = "evaluator"
count = 1
"""


def _hosts(tmp_path: Path, server: Sshd) -> Path:
    opts = ", ".join(json.dumps(o) for o in server.ssh_options)
    text = f"ssh_options = [{opts}]\n"
    for i in range(3):
        venv = tmp_path / f"venv-{i}"
        venv.symlink_to(VENV, target_is_directory=True)  # each host its own interpreter path
        text += (
            f'\n[[hosts]]\nname = "h{i}"\naddress = "{server.address}"\nport = {server.port}\n'
            f'user = "{server.user}"\nidentity = "{server.identity}"\n'
            f'python = "{venv}/bin/python"\nworkers = 1\n'
        )
    path = tmp_path / "hosts.toml"
    path.write_text(text)
    return path


def _finish(launch: Launch) -> dict:
    try:
        code, summary = launch.finish(timeout=200)
    finally:
        launch.kill()
    assert code == 0, launch.stderr
    assert summary is not None and summary["status"] == "completed"
    return summary


@pytest.mark.system
@pytest.mark.timeout(400)
def test_a_pipeline_over_ssh_trains_the_local_runs_weights(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE.format(seed=5))
    hosts = _hosts(tmp_path, sshd)
    remote = _finish(Launch(recipe, tmp_path / "ssh-runs", "--hosts", str(hosts)))
    local = _finish(Launch(recipe, tmp_path / "local-runs"))
    assert remote["model_sha256"] == local["model_sha256"]
    assert simulated_sha(RECIPE, 5, [1, 2]) == remote["model_sha256"]
    assert [w["host"] for w in remote["workers"]] == ["h0", "h1", "h2"]
    assert [w["status"] for w in remote["workers"]] == ["completed"] * 3
    # the snapshots crossed ssh hosts too: the evaluator scored the same weights
    snaps = {s["microbatches"]: s["sha256"] for s in local["technique_report"]["snapshots"]}
    got = {s["microbatches"]: s["sha256"] for s in remote["technique_report"]["snapshots"]}
    assert got == snaps and len(got) >= 4
    stages = remote["technique_report"]["stages"]
    assert [s["store_modes"] for s in stages] == [["pairs"], ["pairs", "pairs"]]
    run_id = json.loads((Path(remote["run"]) / "manifest.json").read_text())["run_id"]
    assert edgetrain_processes(run_id) == {}
