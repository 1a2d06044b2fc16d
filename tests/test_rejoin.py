"""A worker that died comes back (issue 31, item 1; ``[run] restart = N``): the back-off
schedule, the coordinator's rules for a lost worker's re-registration, and a real gossip run
where a worker killed with SIGKILL is restarted by its launcher, takes the live model from a
peer and finishes the run. (The refusal for a technique that cannot rejoin, now only a
plugin's: tests/test_plugin_family.py.)"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from edgetrain.comm import protocol
from edgetrain.comm.control import HandIn, assign_roles
from edgetrain.comm.coordinator import Coordinator
from edgetrain.comm.rejoin import entry_epoch, register_verdict
from edgetrain.launch.restart import RestartBook, backoff_s
from tests.helpers.cli import last_error, run_cli
from tests.helpers.fake_worker import RUN, FakeWorker, pump, started
from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes, kill_all
from tests.helpers.rejoining import (
    fault_and_rejoin,
    gated_env,
    metric_rows,
    rejoined_epoch,
    ssh_launch,
    worker_pid,
)
from tests.helpers.sshd import Sshd, sshd  # noqa: F401 - the fixture

REPO = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------ back-off (pure)


@pytest.mark.parametrize(
    ("attempt", "seconds"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (6, 32.0), (7, 60.0), (100, 60.0)],
)
def test_backoff_doubles_from_one_second_up_to_a_minute(attempt: int, seconds: float) -> None:
    assert backoff_s(attempt) == seconds


def test_backoff_counts_attempts_from_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        backoff_s(0)


def test_the_restart_book_plans_each_restart_after_its_backoff_within_the_budget() -> None:
    book = RestartBook(limit=2)
    assert book.schedule(3, now=10.0) == 1.0
    assert book.schedule(3, now=10.2) is None  # one is planned already
    assert book.pending == {3}
    assert book.due(10.9) == []
    assert book.due(11.0) == [3] and book.attempt(3) == 1 and book.pending == set()
    assert book.mending == {3}  # restarted: on its way back until it exits again
    assert book.schedule(3, now=20.0) == 2.0
    assert book.due(21.0) == [] and book.due(22.0) == [3]
    assert book.schedule(3, now=30.0) is None  # two restarts: the budget is spent
    assert book.mending == set()  # a failure nobody repairs any more
    assert book.schedule(1, now=30.0) == 1.0  # each worker has its own
    assert RestartBook(limit=0).schedule(0, now=0.0) is None


# ------------------------------------------------------------------ re-registration (pure)


@pytest.mark.parametrize(
    ("status", "kind", "phase", "allowed", "verdict"),
    [
        ("pending", None, "registering", False, "register"),
        ("pending", None, "registering", True, "register"),
        ("running", None, "training", True, "refuse"),  # in the run already
        ("registered", None, "training", True, "refuse"),
        ("failed", "failed", "training", True, "rejoin"),
        ("failed", "error", "training", True, "rejoin"),
        ("failed", "failed", "training", False, "stop"),  # [run] restart = 0: today's rule
        ("failed", "failed", "draining", True, "stop"),  # training is over
        ("failed", "failed", "registering", True, "stop"),
        ("failed", "input", "training", True, "stop"),  # a restart does not mend these
        ("failed", "diverged", "training", True, "stop"),
    ],
)
def test_register_verdicts(
    status: str, kind: str | None, phase: str, allowed: bool, verdict: str
) -> None:
    assert register_verdict(status, kind, phase, allowed) == verdict


@pytest.mark.parametrize(
    ("barriers", "released", "running", "epochs", "first"),
    [
        (True, 3, [], 10, 4),  # enters with the epoch after the released one
        (True, None, [3, 3], 10, None),  # no barrier now: it waits for one
        (True, 10, [], 10, None),  # the last epoch was released: nothing to join
        (False, None, [5, 3, 7], 10, 4),  # after the slowest trainer's last epoch
        (False, None, [], 10, None),  # nobody trains: nothing to join
        (False, None, [10], 10, None),
        (False, None, [2], None, 3),
    ],
)
def test_entry_epochs(
    barriers: bool, released: int | None, running: list[int], epochs: int | None, first: int | None
) -> None:
    assert entry_epoch(barriers, released, running, epochs) == first


# ------------------------------------------------------------------ the coordinator's rules


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def test_a_lost_worker_registering_again_is_told_to_stop_without_restart(
    ctx: zmq.Context,
) -> None:
    coord, workers = started(ctx, 3)
    again = FakeWorker(ctx, coord.endpoint, 2, identity="w2.new")
    try:
        coord.mark_failed(2, "was killed by SIGKILL")
        again.send(protocol.REGISTER, {"host": "h2"})
        for _ in range(250):
            if coord.poll(20) or coord.traffic.dropped["failed_sender"]:
                break
        again.seq = coord.control.last(2)  # a stop is obeyed whatever its number
        assert again.expect(protocol.STOP).meta["lost"] is True
        assert coord.workers[2].status == "failed" and coord.joining == set()
    finally:
        for w in (*workers, again):
            w.close()
        coord.close()


def test_a_restarted_worker_rejoins_at_the_next_barrier(ctx: zmq.Context) -> None:
    coord, (a, b, c) = started(ctx, 3, rejoin=True, epochs=3)
    state = HandIn({"x": np.zeros(2, "float32")}, {"alpha": 0.25})
    coord.rejoin_state = lambda wid: (1, state)
    again = FakeWorker(ctx, coord.endpoint, 2, identity="w2.new")
    try:
        coord.mark_failed(2, "was killed by SIGKILL")
        for w in (a, b):
            assert w.expect(protocol.PEERS).meta["failed"] == [2]
        again.send(protocol.REGISTER, {"host": "h2b", "pid": 7})
        pump(coord, "rejoining")
        welcome = again.expect(protocol.WELCOME)  # numbered from 1 again: a new process
        assert welcome.meta["rejoin"] is True
        assert welcome.meta["resume"] == {"epoch": 1, "handin": {"alpha": 0.25}}  # fallback
        assert list(welcome.tensors) == ["x"]
        assert 2 not in coord.alive and coord.failed == []  # setting up: neither
        again.send(protocol.READY, {"endpoints": {"gossip": "tcp://127.0.0.1:2002"}})
        pump(coord, "ready")
        assert again.nothing(coord)  # with barriers it waits for the next release
        for w in (a, b):
            w.send(protocol.EPOCH_END, {"loss": 1.0}, epoch=1)
        events = pump(coord, "barrier")
        joined = [e for e in events if e.kind == "joined"]
        assert [(e.worker, e.data["epoch"]) for e in joined] == [(2, 2)]
        for w in (a, b):  # the others learn where it is now, before their go
            peers = w.expect(protocol.PEERS)
            assert peers.meta["joined"] == {"2": {"gossip": "tcp://127.0.0.1:2002"}}
            assert w.expect(protocol.GO).epoch == 2
        start = again.expect(protocol.START)
        assert start.meta["rejoin"] == {"epoch": 2}
        assert set(start.meta["roster"]) == {"0", "1", "2"}
        assert coord.workers[2].status == "running" and 2 in coord.alive
        for w in (a, b):  # the next barrier waits for it
            w.send(protocol.EPOCH_END, {"loss": 1.0}, epoch=2)
        pump(coord, "epoch", count=2)
        assert coord.waiting_on() == [2]
        again.send(protocol.EPOCH_END, {"loss": 1.0}, epoch=2)
        pump(coord, "barrier")
    finally:
        for w in (a, b, c, again):
            w.close()
        coord.close()


def test_a_worker_that_comes_back_after_the_last_barrier_is_turned_away(
    ctx: zmq.Context,
) -> None:
    coord, (a, b, c) = started(ctx, 3, rejoin=True, epochs=1)
    again = FakeWorker(ctx, coord.endpoint, 2, identity="w2.new")
    try:
        coord.mark_failed(2, "was killed by SIGKILL")
        again.send(protocol.REGISTER, {})
        pump(coord, "rejoining")
        again.expect(protocol.WELCOME)
        again.send(protocol.READY, {"endpoints": {"gossip": "tcp://127.0.0.1:2002"}})
        pump(coord, "ready")
        for w in (a, b):
            w.send(protocol.EPOCH_END, {"loss": 1.0}, epoch=1)
        events = pump(coord, "rejoin_refused")
        assert "barrier" in [e.kind for e in events]
        again.expect(protocol.STOP)
        info = coord.workers[2]
        assert info.status == "failed" and info.error_kind == "late"
    finally:
        for w in (a, b, c, again):
            w.close()
        coord.close()


def test_a_reregistration_without_the_runs_secret_is_dropped(ctx: zmq.Context) -> None:
    secret = protocol.new_secret()  # ``started`` sends no tokens: this run is built by hand
    roles = assign_roles(["trainer"] * 2)
    coord = Coordinator(RUN, {}, roles, context=ctx, secret=secret, rejoin=True)
    a, b = (FakeWorker(ctx, coord.endpoint, i) for i in range(2))
    thief = FakeWorker(ctx, coord.endpoint, 1, identity="w1.thief")
    again = FakeWorker(ctx, coord.endpoint, 1, identity="w1.new")

    def auth(wid: int) -> dict[str, Any]:
        return {protocol.AUTH: protocol.auth_token(secret, RUN, wid)}

    try:
        for w in (a, b):
            w.send(protocol.REGISTER, auth(w.wid))
        pump(coord, "registered", count=2)
        for w in (a, b):
            w.expect(protocol.WELCOME)
            w.send(protocol.READY, {"endpoints": {"g": f"tcp://127.0.0.1:{1000 + w.wid}"},
                                    **auth(w.wid)})  # fmt: skip
        pump(coord, "started")
        coord.mark_failed(1, "was killed by SIGKILL")
        thief.send(protocol.REGISTER, {protocol.AUTH: "0" * 64})
        thief.send(protocol.REGISTER, {})
        for _ in range(100):
            coord.poll(20)
            if coord.traffic.dropped["bad_auth"] >= 2:
                break
        assert coord.traffic.dropped["bad_auth"] == 2 and coord.joining == set()
        again.send(protocol.REGISTER, auth(1))
        pump(coord, "rejoining")
        assert again.expect(protocol.WELCOME).meta["rejoin"] is True
        assert not thief.sock.poll(50)  # nothing went to the impostor
    finally:
        for w in (a, b, thief, again):
            w.close()
        coord.close()


# ------------------------------------------------------------------ the check


BASE = """
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
epochs = 2
"""


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "[run] restart: Input should be greater than or equal to 0 (got -1)"),
        ("1.5", "[run] restart: Input should be a valid integer (got 1.5)"),
        ("1000", "[run] restart: Input should be less than or equal to 100 (got 1000)"),
        ('"x"', "[run] restart: Input should be a valid integer (got 'x')"),
    ],
)
def test_bad_restart_values_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(BASE + "[[workers]]\ncount = 2\n")
    code, _, err = run_cli(capsys, "check", str(recipe), "--set", f"run.restart={value}")
    assert code == 2
    assert message in last_error(err)
    assert "Traceback" not in err


@pytest.mark.parametrize("technique", ["dlion", "gaia", "ako"])
def test_restart_of_an_exchange_technique_needs_epoch_barriers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], technique: str
) -> None:
    recipe = tmp_path / "r.toml"
    text = BASE.replace("epochs = 2", f'epochs = 2\ntechnique = "{technique}"')
    recipe.write_text("[run]\nrestart = 2\n" + text + "[gossip]\nsync_epochs = false\n"
                      "[[workers]]\ncount = 2\n")  # fmt: skip
    code, _, err = run_cli(capsys, "check", str(recipe))
    assert code == 2, err
    assert "re-enters at an epoch barrier, and [gossip] sync_epochs = false" in last_error(err)
    assert "Traceback" not in err


# ------------------------------------------------------------------ a real run

RECIPE = """
[run]
name = "rejoin"
seed = 5
heartbeat_s = 0.5
restart = 2
checkpoint_every = 2
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
technique = "{technique}"
epochs = {epochs}
batch_size = 16
[gossip]
probability = 0.3
[[workers]]
count = 3
"""


def _initial_sha256(recipe: Path) -> str:
    """The SHA-256 of the recipe's initial model (every worker builds the same)."""
    from edgetrain.comm.wire import arrays_from_state
    from edgetrain.recipe import load_recipe
    from edgetrain.runtime.setup import build_run_model, load_run_data
    from edgetrain.runtime.weights import float_state, model_sha256

    loaded, _ = load_recipe(recipe)
    model = build_run_model(loaded, load_run_data(loaded))
    return model_sha256(arrays_from_state(float_state(model)))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("technique", ["gosgd", "edgegossip"])
def test_a_killed_worker_is_restarted_and_rejoins_with_a_peers_model(
    tmp_path: Path, technique: str
) -> None:
    recipe = tmp_path / "recipe.toml"
    text = RECIPE.format(epochs=40, technique=technique)
    if technique == "edgegossip":  # one of three away is over f_threshold: go on meanwhile
        text += '[edgegossip]\non_failure = "redistribute"\n'
    recipe.write_text(text)
    env, gate = gated_env(tmp_path)
    launch = Launch(recipe, tmp_path / "runs", env=env)
    got = fault_and_rejoin(launch, gate, 2, signal.SIGKILL, ready=[0, 1, 2], at_epoch=3)
    got.assert_completed()
    run, joined, first = launch.run_dir, got.joined, got.first
    assert first is not None

    # it took the live model from a peer, not its initial weights or the checkpoint
    rejoin = first["rejoin"]
    assert rejoin["source"] == "peer", rejoin
    assert rejoin["model_sha256"] == rejoin["peer_sha256"]
    assert rejoin["model_sha256"] != rejoin["before_sha256"]
    assert rejoin["model_sha256"] != _initial_sha256(recipe)
    served = [s for w in (0, 1) for r in metric_rows(run, w) for s in r.get("models_served", [])]
    assert {"to": 2, "model_sha256": rejoin["model_sha256"]}.items() <= served[0].items()
    assert first["epoch"] == joined["epoch"]

    # every worker reports its final epoch; the join is in the events, manifest and report
    for w in range(3):
        rows = metric_rows(run, w)
        assert any(r["event"] == "final" for r in rows)
        assert max(r["epoch"] for r in rows if r["event"] == "epoch") == 40
    final_manifest = json.loads((run / "manifest.json").read_text())
    assert [w["status"] for w in final_manifest["workers"]] == ["completed"] * 3
    assert final_manifest["failed_workers"] == []
    events = [(m["worker"], m["event"]) for m in final_manifest["membership"]]
    assert events == [(2, "left"), (2, "restarted"), (2, "rejoining"), (2, "joined")]
    assert final_manifest["workers"][2]["restarts"] == 1
    report = json.loads((run / "report" / "summary.json").read_text())
    assert report["membership"] == final_manifest["membership"]
    assert "worker 2 joined at" in (run / "report" / "summary.md").read_text()

    # start-up: a restarted process to its first step after the rejoin, and a normal worker's
    # (spawned as the run starts: ``t`` counts from there, and the restart has both clocks)
    restarted = next(r for r in launch.rows if r.get("event") == "restarted")
    run_t0 = restarted["spawned_at"] - restarted["t"]
    rejoin_s = first["first_step_at"] - restarted["spawned_at"]
    normal = [
        next(r for r in metric_rows(run, w) if r["event"] == "epoch")["first_step_at"] - run_t0
        for w in (0, 1)
    ]
    print(
        f"\nrejoin: {rejoin_s:.2f} s from the restarted process's start to its first step "
        f"(fetch {rejoin['fetch_s']:.2f} s); normal start-up: "
        f"{', '.join(f'{s:.2f}' for s in normal)} s"
    )
    assert rejoin_s > 0


# ------------------------------------------------------------------ over ssh


@pytest.mark.timeout(300)
def test_a_worker_killed_on_its_ssh_host_is_restarted_there_and_rejoins(
    tmp_path: Path,
    sshd: Sshd,  # noqa: F811
) -> None:
    launch, gate = ssh_launch(tmp_path, sshd, "restart = 1")
    run_id = ""
    try:
        launch.wait_epochs(3, epoch=2, timeout=180)
        run_id = launch.manifest()["run_id"]
        os.kill(worker_pid(run_id, 2), signal.SIGKILL)  # on its host, behind the launcher's back
        launch.wait_event(lambda r: r.get("event") == "restarted" and r.get("worker") == 2,
                          60, "worker 2 is restarted over ssh")  # fmt: skip
        first = rejoined_epoch(launch, 2, 120)
        gate.touch()
        code, summary = launch.finish(timeout=200)
    finally:
        gate.touch()
        launch.kill()
        if run_id:
            kill_all(edgetrain_processes(run_id))
    assert code == 0, launch.stderr[-3000:]
    assert summary is not None and summary["status"] == "completed"
    assert first["rejoin"]["source"] == "peer"
    manifest = json.loads((launch.run_dir / "manifest.json").read_text())
    assert [w["status"] for w in manifest["workers"]] == ["completed"] * 3
    assert ("2", "joined") in {(str(m["worker"]), m["event"]) for m in manifest["membership"]}
    assert edgetrain_processes(run_id) == {}


# ------------------------------------------------------------------ a parameter-server trainer

PS_RECIPE = """
[run]
name = "rejoin-ps"
seed = 5
heartbeat_s = 0.5
restart = 1
checkpoint_every = 0
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "ps"
technique = "{technique}"
epochs = 30
batch_size = 32
lr = 0.05
[ps]
consistency = "{consistency}"
[[workers]]
role = "server"
count = 1
[[workers]]
count = 3
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("technique", "consistency", "fault"),
    [("dynacomm", "bsp", signal.SIGKILL), ("lbl", "ssp", signal.SIGSTOP)],
)
def test_a_lost_ps_trainer_is_restarted_and_trains_on_the_shards_current_parameters(
    tmp_path: Path, technique: str, consistency: str, fault: int
) -> None:
    """Killed, or suspended past the heartbeat limit (the launcher then ends the process the
    run lost, which would never speak again, and restarts it)."""
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(PS_RECIPE.format(technique=technique, consistency=consistency))
    env, gate = gated_env(tmp_path)
    launch = Launch(recipe, tmp_path / "runs", env=env)
    # the trainers end an epoch (worker 0 is the shard), then trainer 3 is lost
    got = fault_and_rejoin(launch, gate, 3, fault, ready=[1, 2, 3])
    got.assert_completed()
    summary, joined, first = got.summary, got.joined, got.first
    assert summary is not None and first is not None
    run = launch.run_dir
    rejoin = first["rejoin"]
    assert rejoin["source"] == "servers" and rejoin["epoch"] == joined["epoch"]
    iterations = first["epoch_steps"]
    assert rejoin["iteration"] == (joined["epoch"] - 1) * iterations
    # the shard took it back from the next iteration it applied, and its pushes count again
    server = next(r for r in metric_rows(run, 0) if r["event"] == "final")
    taken = server["rejoined"]
    assert [t["trainer"] for t in taken] == [3]
    assert rejoin["iteration"] <= taken[0]["iteration"] <= rejoin["iteration"] + 1
    assert "unknown_trainer" not in server["dropped"], server["dropped"]
    for w in range(1, 4):
        rows = metric_rows(run, w)
        assert any(r["event"] == "final" for r in rows)
        assert max(r["epoch"] for r in rows if r["event"] == "epoch") == 30
    manifest = json.loads((run / "manifest.json").read_text())
    assert [w["status"] for w in manifest["workers"]] == ["completed"] * 4
    events = [(m["worker"], m["event"]) for m in manifest["membership"]]
    assert events == [(3, "left"), (3, "restarted"), (3, "rejoining"), (3, "joined")]
    assert summary["test_accuracy"] > 0.85, summary["test_accuracy"]
