"""New workers joining a running run (issue 31, item 1: "a new worker can join the same way where
the family allows it"): ``[run] join_slots = N`` keeps the recipe's last N trainers as open
slots, which ``edgetrain join RUN --worker ID`` fills while the run trains.

Pure: which workers are slots, which recipes are refused, the coordinator's view of a slot, the
membership line. Real runs: a GoSGD run where a new worker takes an open slot, fetches the live
model from a peer and finishes with the others; a parameter-server run where a new trainer
joins, pulls the shards' parameters and the shard takes its pushes; a slot nobody joins ends the
run as ``vacant``, and no failure budget counts it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgetrain import tomlconfig
from edgetrain.cli.live_rows import Row, apply, apply_run, status
from edgetrain.comm.control import Role
from edgetrain.comm.coordinator import Coordinator
from edgetrain.comm.rejoin import VACANT, register_verdict
from edgetrain.errors import RecipeError
from edgetrain.launch.slots import check_join_slots, vacant_workers
from edgetrain.recipe import parse_recipe
from edgetrain.report.runs import membership_text
from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes, kill_all
from tests.helpers.rejoining import gated_env, metric_rows, rejoined_epoch, run_command

REPO = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------ which workers are slots


@pytest.mark.parametrize(
    ("roles", "slots", "vacant"),
    [
        (["trainer"] * 3, 0, set()),
        (["trainer"] * 3, 1, {2}),
        (["trainer"] * 4, 2, {2, 3}),
        (["server", "trainer", "trainer", "server", "trainer"], 2, {2, 4}),
        (["server", "trainer", "trainer"], 1, {2}),
    ],
)
def test_the_slots_are_the_last_trainers(roles: list[str], slots: int, vacant: set[int]) -> None:
    assert vacant_workers(roles, slots) == vacant


def _recipe(text: str) -> Any:
    return parse_recipe(tomlconfig.loads(text))


GOSGD = """
[run]
join_slots = {slots}
[data]
dataset = "digits"
[train]
technique = "{technique}"
[[workers]]
count = 3
"""


@pytest.mark.parametrize("technique", ["gosgd"])
def test_the_techniques_that_take_new_workers_accept_slots(technique: str) -> None:
    check_join_slots(_recipe(GOSGD.format(slots=1, technique=technique)))
    check_join_slots(_recipe(GOSGD.format(slots=0, technique="edgegossip")))


@pytest.mark.parametrize(
    ("slots", "technique", "message"),
    [
        (1, "edgegossip", "a new worker cannot join a running gossip/edgegossip run"),
        (1, "dlion", "a new worker cannot join a running gossip/dlion run"),
        (3, "gosgd", "[run] join_slots = 3 leaves none of the recipe's 3 trainers"),
    ],
)
def test_slots_a_run_cannot_take_are_refused(slots: int, technique: str, message: str) -> None:
    with pytest.raises(RecipeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_join_slots(_recipe(GOSGD.format(slots=slots, technique=technique)))


def test_a_parameter_server_recipe_with_a_slot_is_accepted() -> None:
    check_join_slots(_recipe(PS_RECIPE))


def test_the_coordinator_counts_a_slot_as_left_in_no_failure_budget() -> None:
    roles = [Role("trainer", i) for i in range(3)]
    coord = Coordinator("r", {}, roles, rejoin=True, vacant={2})
    try:
        assert coord.failed == [2] and coord.workers[2].error_kind == VACANT
        assert coord.failed_fraction == 0.0
        assert coord.alive == [0, 1] and "2" not in coord.roster()
        # a new worker's register while the run trains is a rejoin
        assert register_verdict("failed", VACANT, "training", allowed=True) == "rejoin"
        coord.start_directives = {0: {"iterations": 7}, 1: {"iterations": 7}}
        assert coord._directive_of(2) == {"iterations": 7}  # its role's first worker's
    finally:
        coord.close()


def test_the_membership_line_names_a_new_worker() -> None:
    row = {"worker": 2, "event": "restarted", "t": 3.5, "by": "join", "host": "b", "new": True}
    assert membership_text(row) == (
        "worker 2 restarted at 3.5 s by edgetrain join on b (a new worker, in an open slot)"
    )


def test_the_live_view_shows_an_open_slot_until_a_new_worker_joins() -> None:
    row = Row(2)
    apply(row, "vacant", {"role": "trainer"}, 0.0)
    apply_run({2: row}, "started", {}, 1.0)  # the run starts without it
    assert status(row, 2.0) == "open slot: edgetrain join RUN --worker ID fills it"
    apply(row, "restarted", {"by": "join", "new": True, "host": "b"}, 3.0)
    assert status(row, 4.0).startswith("starting: launching the process")
    apply(row, "joined", {"epoch": 3}, 5.0)
    assert status(row, 6.0) == "training"


# ------------------------------------------------------------------ real runs

RECIPE = """
[run]
name = "slots"
seed = 5
heartbeat_s = 0.5
checkpoint_every = 0
join_slots = 1
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
epochs = 40
batch_size = 16
[gossip]
probability = 0.3
[[workers]]
count = 3
"""

PS_RECIPE = """
[run]
name = "slots-ps"
seed = 5
heartbeat_s = 0.5
checkpoint_every = 0
join_slots = 1
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "ps"
technique = "dynacomm"
epochs = 40
batch_size = 32
lr = 0.05
[[workers]]
role = "server"
count = 1
[[workers]]
count = 3
"""


def _fill_slot(
    tmp_path: Path, text: str, slot: int, trainers: list[int]
) -> tuple[Launch, dict[str, Any]]:
    """Launch ``text`` gated, wait for ``trainers`` to end epoch 2, check the slot shows as open,
    join a new worker into ``slot`` and follow it to its first epoch; the launch finished."""
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(text)
    env, gate = gated_env(tmp_path)
    launch = Launch(recipe, tmp_path / "runs", env=env)
    run_id = ""
    try:
        for w in trainers:
            launch.wait_event(
                lambda r, w=w: r.get("event") == "epoch" and r.get("worker") == w
                and r.get("epoch", 0) >= 2, 180, f"worker {w} ends epoch 2",
            )  # fmt: skip
        run, run_id = launch.run_dir, launch.manifest()["run_id"]
        assert launch.manifest()["workers"][slot]["status"] == "vacant"
        status = run_command("status", run)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["workers"][slot]["state"] == "open slot"
        done = run_command("join", run, "--worker", str(slot))
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["accepted"] is True and answer["new"] is True and answer["pid"] > 0
        first = rejoined_epoch(launch, slot, 120)
        gate.touch()
        code, summary = launch.finish(timeout=200)
    finally:
        gate.touch()
        launch.kill()
        if run_id:
            kill_all(edgetrain_processes(run_id))
    assert code == 0, launch.stderr[-3000:]
    assert summary is not None and summary["status"] == "completed"
    assert edgetrain_processes(run_id) == {}
    manifest = json.loads((launch.run_dir / "manifest.json").read_text())
    assert all(w["status"] == "completed" for w in manifest["workers"]), manifest["workers"]
    events = [(m["worker"], m["event"], m.get("new")) for m in manifest["membership"]]
    assert events == [(slot, "restarted", True), (slot, "rejoining", None), (slot, "joined", None)]
    assert (
        "(a new worker, in an open slot)" in (launch.run_dir / "report" / "summary.md").read_text()
    )
    return launch, first


@pytest.mark.timeout(300)
def test_a_new_gossip_worker_takes_an_open_slot_with_a_peers_model(tmp_path: Path) -> None:
    launch, first = _fill_slot(tmp_path, RECIPE, 2, [0, 1])
    assert first["rejoin"]["source"] == "peer", first["rejoin"]
    final = next(r for r in metric_rows(launch.run_dir, 2) if r["event"] == "final")
    assert final["steps"] > 0 and final["final_test_accuracy"] > 0.5, final


@pytest.mark.timeout(300)
def test_a_new_ps_trainer_takes_an_open_slot_and_the_shard_takes_its_pushes(
    tmp_path: Path,
) -> None:
    launch, first = _fill_slot(tmp_path, PS_RECIPE, 3, [1, 2])
    rejoin = first["rejoin"]
    assert rejoin["source"] == "servers", rejoin
    server = next(r for r in metric_rows(launch.run_dir, 0) if r["event"] == "final")
    assert [t["trainer"] for t in server["rejoined"]] == [3]
    assert "unknown_trainer" not in server.get("dropped", {}), server.get("dropped")
    assert first["epoch_steps"] > 0


@pytest.mark.timeout(240)
def test_a_slot_nobody_joins_ends_vacant_and_the_run_completes(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE.replace("epochs = 40", "epochs = 3").replace("join_slots = 1",
                      "join_slots = 1\nmax_failed_fraction = 0"))  # fmt: skip
    launch = Launch(recipe, tmp_path / "runs")
    run_id = ""
    try:
        code, summary = launch.finish(timeout=200)
        run_id = launch.manifest()["run_id"]
    finally:
        launch.kill()
        if run_id:
            kill_all(edgetrain_processes(run_id))
    assert code == 0, launch.stderr[-3000:]
    assert summary is not None and summary["status"] == "completed"
    manifest = json.loads((launch.run_dir / "manifest.json").read_text())
    assert [w["status"] for w in manifest["workers"]] == ["completed", "completed", "vacant"]
    assert manifest["workers"][2]["pid"] is None
    assert manifest["membership"] == []
