"""A lost Mercury device comes back (issue 31): every device serves a shard, so under ``[run]
restart`` the run rewinds to the last checkpoint as a pipeline does. With one thread and no
resharding a device is deterministic, so a run whose device was killed ends with the
undisturbed run's model, bit for bit; with the BACC threads and resharding (the shipped
recipe's settings) a suspended device comes back and the run completes with every device."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.launching import Launch, completed
from tests.helpers.rejoining import fault_and_rejoin, gated_env, metric_rows

RECIPE = """
[run]
name = "{name}"
seed = 2
heartbeat_s = 0.5
checkpoint_every = 1
restart = {restart}
[data]
dataset = "digits"
[model]
name = "lenet5"
[train]
family = "ps"
technique = "mercury"
epochs = 4
batch_size = 16
lr = 0.004
[mercury]
epoch_iterations = 10
hash_every = 5
{extra}
[[workers]]
count = 3
"""
ONE_THREAD = 'scheduler = "sequential"\nresharding = "none"'
BACC = "reshard_every = 5\nreshard_budget = 1.0"


def _recipe(tmp_path: Path, name: str, restart: int, extra: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(RECIPE.format(name=name, restart=restart, extra=extra))
    return path


def _rewound(launch: Launch, summary: dict[str, Any] | None, victim: int) -> None:
    """One rewind, of the survivors back to a checkpoint with the victim; every epoch once."""
    assert summary is not None
    rewinds = launch.manifest()["rewinds"]
    survivors = [w for w in range(3) if w != victim]
    assert len(rewinds) == 1 and rewinds[0]["back"] == [victim]
    assert rewinds[0]["workers"] == survivors and rewinds[0]["epoch"] >= 1
    for w in survivors:
        final = [r for r in metric_rows(launch.run_dir, w) if r["event"] == "final"]
        assert final[-1]["rewinds"] == 1
    assert [p["epoch"] for p in summary["curve"]] == [1, 2, 3, 4]
    assert summary["technique_report"] is not None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_killed_device_comes_back_and_the_run_ends_with_the_undisturbed_model(
    tmp_path: Path,
) -> None:
    _, calm = completed(_recipe(tmp_path, "calm", 0, ONE_THREAD), tmp_path / "calm-runs")
    env, gate = gated_env(tmp_path)
    launch = Launch(_recipe(tmp_path, "lost", 1, ONE_THREAD), tmp_path / "runs", env=env)
    got = fault_and_rejoin(launch, gate, 1, signal.SIGKILL, ready=[0, 1, 2], first_epoch=False)
    got.assert_completed()
    _rewound(launch, got.summary, 1)
    assert got.summary is not None
    assert got.summary["model_sha256"] == calm["model_sha256"]
    assert got.summary["test_accuracy"] == calm["test_accuracy"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_suspended_device_with_the_bacc_threads_comes_back(tmp_path: Path) -> None:
    env, gate = gated_env(tmp_path)
    launch = Launch(_recipe(tmp_path, "stopped", 1, BACC), tmp_path / "runs", env=env)
    got = fault_and_rejoin(launch, gate, 2, signal.SIGSTOP, ready=[0, 1, 2], first_epoch=False)
    got.assert_completed()
    _rewound(launch, got.summary, 2)
    assert got.summary is not None and got.summary["test_accuracy"] > 0.5
