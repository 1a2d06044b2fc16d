"""A lost parameter-server shard is rebuilt from the trainers' copies (issue 31, item 2): the
rules that pick each tensor's copy and the trainer's kept pushes (pure, literal tables), the
``ps.state`` checks, and real runs where a shard's process is killed or suspended, restarted by
its launcher and rebuilt, and the run completes; under BSP with plain SGD the final model is
bit for bit the undisturbed run's."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgetrain.ps.recovery import KeptPushes, Replica, rebuild, state_problem
from tests.helpers.launching import Launch, completed
from tests.helpers.rejoining import fault_and_rejoin, gated_env, metric_rows

# ------------------------------------------------------------------ the rebuild (pure)


def test_each_tensor_comes_from_the_freshest_copy_lowest_trainer_on_a_tie() -> None:
    replicas = {
        2: Replica({"a": 7, "b": 6, "c": 6}, {"a": 6, "b": 6}),
        3: Replica({"a": 6, "b": 7, "c": 6}, {"a": 6, "b": 6}),
        4: Replica({"a": 7, "b": 6}, {"a": 7}),
    }
    out = rebuild(["a", "b", "c", "d"], replicas, {"a": 0, "b": 0, "c": 0, "d": 5})
    assert out.source == {"a": 2, "b": 3, "c": 2}
    assert out.version == {"a": 7, "b": 7, "c": 6, "d": 5}  # d: nobody holds it
    # SSP clocks: after the last acknowledged push, never below the rebuilt version
    assert out.clocks["a"] == {2: 7, 3: 7, 4: 8}
    assert out.clocks["b"] == {2: 7, 3: 7, 4: 7}
    assert out.clocks["d"] == {2: 5, 3: 5, 4: 5}


def test_a_rebuild_without_copies_keeps_the_fallback_versions() -> None:
    out = rebuild(["a"], {}, {"a": 3})
    assert out.source == {} and out.version == {"a": 3} and out.clocks == {"a": {}}


def test_kept_pushes_last_until_a_pull_shows_their_update() -> None:
    kept = KeptPushes()
    g5 = {"a": np.zeros(2, np.float32), "b": np.ones(2, np.float32)}
    kept.pushed(5, g5)
    kept.pushed(6, {"a": np.full(2, 2, np.float32)})
    assert {it: sorted(a) for it, a in kept.of(["a", "b"], set()).items()} == {5: ["b"], 6: ["a"]}
    kept.pulled(["a", "b"], 6)  # version 6: iteration 5's update is applied, not 6's
    assert {it: sorted(a) for it, a in kept.of(["a", "b"], set()).items()} == {6: ["a"]}
    assert kept.of(["a"], {"a"}) == {}
    kept.pulled(["a"], 7)
    assert len(kept) == 0


def _state(**over: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    meta: dict[str, Any] = {"layout": "L", "names": ["w"], "versions": {"w": 3}, "pushed": {}}
    tensors = {"w": np.zeros((2, 2), np.float32)}
    meta.update(over)
    return meta, tensors


@pytest.mark.parametrize(
    ("over", "tensors", "reason"),
    [
        ({}, None, None),
        ({"names": [], "versions": {}}, {}, None),  # a trainer that pulled nothing yet
        ({"layout": "X"}, None, "wrong_layout"),
        ({"names": ["v"], "versions": {"v": 1}}, {"v": np.zeros((2, 2), np.float32)}, "bad_state"),
        ({"names": ["w", "w"]}, None, "bad_state"),
        ({"versions": {"w": -1}}, None, "bad_state"),
        ({"versions": {"w": True}}, None, "bad_state"),
        ({"versions": {}}, None, "bad_state"),
        ({"pushed": {"v": 1}}, None, "bad_state"),
        ({"pushed": []}, None, "bad_state"),
        ({}, {}, "bad_state"),
        ({}, {"w": np.zeros((2, 3), np.float32)}, "bad_tensor_shape"),
        ({}, {"w": np.zeros((2, 2), np.float64)}, "bad_tensor_dtype"),
        ({}, {"w": np.full((2, 2), np.nan, np.float32)}, "non_finite"),
    ],
)
def test_a_state_is_checked_before_it_is_used(
    over: dict[str, Any], tensors: dict[str, np.ndarray] | None, reason: str | None
) -> None:
    meta, default = _state(**over)
    shapes = {"w": (2, 2), "u": (1,)}
    got = state_problem(meta, default if tensors is None else tensors, {"w", "u"}, shapes, "L")
    assert got == reason


# ------------------------------------------------------------------ real runs

RECIPE = """
[run]
name = "shard-{name}"
seed = 7
heartbeat_s = 0.5
restart = {restart}
checkpoint_every = 2
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "ps"
technique = "{technique}"
epochs = 8
batch_size = 32
lr = 0.05
momentum = 0.0
[ps]
consistency = "{consistency}"
[[workers]]
role = "server"
count = 2
[[workers]]
count = 2
"""


@pytest.mark.timeout(420)
@pytest.mark.parametrize(
    ("technique", "consistency", "fault"),
    [("dynacomm", "bsp", signal.SIGKILL), ("lbl", "ssp", signal.SIGSTOP)],
)
def test_a_lost_shard_is_restarted_and_rebuilt_from_the_trainers(
    tmp_path: Path, technique: str, consistency: str, fault: int
) -> None:
    """Shard 1 (worker 1) killed, or suspended past the heartbeat limit, after the trainers
    (workers 2 and 3) ended an epoch: its launcher restarts it, the trainers send it their
    copies, and the run completes with every worker."""
    keys = {"technique": technique, "consistency": consistency}
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE.format(name="lost", restart=1, **keys))
    env, gate = gated_env(tmp_path)
    launch = Launch(recipe, tmp_path / "runs", env=env)
    got = fault_and_rejoin(launch, gate, 1, fault, ready=[2, 3], first_epoch=False)
    got.assert_completed()
    summary = got.summary
    assert summary is not None
    run = launch.run_dir
    shard = next(r for r in metric_rows(run, 1) if r["event"] == "final")
    recovery = shard["recovery"]
    assert recovery["source"] == "trainers" and recovery["optimizer"] == "reset"
    assert recovery["kept_own"] == 0 and set(recovery["copies"]) <= {"2", "3"}
    for w in (2, 3):
        final = next(r for r in metric_rows(run, w) if r["event"] == "final")
        assert [r["shard"] for r in final["shard_recoveries"]] == [1]
        assert max(r["epoch"] for r in metric_rows(run, w) if r["event"] == "epoch") == 8
    manifest = json.loads((run / "manifest.json").read_text())
    assert [w["status"] for w in manifest["workers"]] == ["completed"] * 4
    events = [(m["worker"], m["event"]) for m in manifest["membership"]]
    assert events == [(1, "left"), (1, "restarted"), (1, "rejoining"), (1, "joined")]
    # every checkpoint written holds both shards' parts
    for folder in sorted((run / "checkpoints").glob("epoch-*")):
        about = json.loads((folder / "checkpoint.json").read_text())
        roles = [str(w.get("role", "")) for w in about["workers"].values()]
        assert sum(r.startswith("server") for r in roles) == 2, (folder, about["workers"])
    assert summary["test_accuracy"] > 0.85, summary["test_accuracy"]
    if consistency == "bsp":  # exact: the undisturbed run's model, bit for bit
        again = tmp_path / "again"
        again.mkdir()
        (again / "recipe.toml").write_text(RECIPE.format(name="calm", restart=0, **keys))
        _, calm = completed(again / "recipe.toml", again / "runs", timeout=200)
        assert calm["model_sha256"] == summary["model_sha256"]
