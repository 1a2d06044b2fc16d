"""The runtime faults of the code review (shared/specs/review.md section 5), one test each.

Each test failed before its fix: B1 a diverging loss, B4 the gossip outbox's model copies, B5 a
stop swallowed as a data error, B6 a second SIGTERM during clean-up, B7 a bind failure as an
internal error, B11 the launcher log of the wrong run, B14 the live bar going backwards, and the
worker side of B10 (a new drain directive). B3, B8, B10 and B12 are covered in
test_coordinator_health.py, test_transport_hardening.py and test_coordinator.py.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pickle
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from rich.console import Console

from edgetrain.cli.live import LiveProgress
from edgetrain.comm import protocol
from edgetrain.comm.channel import BindError, Traffic
from edgetrain.comm.control import Event, Role, assign_roles
from edgetrain.comm.wire import Message
from edgetrain.data import cifar
from edgetrain.gossip import gosgd
from edgetrain.gossip.gosgd import GoSGD
from edgetrain.launch import api
from edgetrain.launch.api import LaunchRequest, prepare
from edgetrain.recipe import parse_recipe
from edgetrain.rundir import read_jsonl
from edgetrain.runtime.base import WorkerContext
from edgetrain.runtime.session import Session
from edgetrain.worker.main import Terminated, _on_signal
from tests.helpers.cli import last_error
from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes
from tests.helpers.waiting import wait_until

RECIPE = """
[run]
name = "{name}"
checkpoint_every = 0
[data]
dataset = "digits"
[train]
epochs = {epochs}
lr = {lr}
batch_size = 16
[[workers]]
count = 2
[[workers]]
count = 1
slowdown = {slowdown}
"""


def _recipe(
    tmp_path: Path, name: str = "f", epochs: int = 5, lr: float = 0.05, slowdown: float = 1.0
) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(RECIPE.format(name=name, epochs=epochs, lr=lr, slowdown=slowdown))
    return path


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.mark.timeout(180)
def test_b1_a_diverging_loss_stops_the_run_with_one_line(tmp_path: Path) -> None:
    launch = Launch(_recipe(tmp_path, lr=1e12), tmp_path / "runs")
    try:
        code, summary = launch.finish(timeout=150)
    finally:
        launch.kill()
    last = last_error(launch.stderr)
    assert code == 1 and "Traceback" not in launch.stderr
    assert last.startswith("error: loss became NaN at epoch 1 step ")
    assert last.endswith("; lower [train] lr")
    manifest = launch.manifest()
    assert manifest["status"] == "diverged" and manifest["error"] in last
    assert summary is not None and summary["status"] == "diverged"
    # metrics intact: every file parses, and the diverging worker's failure is in its own
    failed = [w for w in manifest["workers"] if w["status"] == "failed"]
    assert len(failed) >= 1
    rows = read_jsonl(launch.run_dir / "metrics" / f"worker-{failed[0]['id']}.jsonl")
    assert rows[-1]["event"] == "failed" and rows[-1]["kind"] == "diverged"
    assert edgetrain_processes(manifest["run_id"]) == {}


def test_b4_a_full_outbox_costs_no_model_copy(
    tmp_path: Path, ctx: zmq.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = parse_recipe(
        {"gossip": {"probability": 1.0}, "model": {"name": "mlp"}, "workers": [{"count": 2}]}
    )
    worker = GoSGD(WorkerContext(recipe, "run", 0, Role("trainer", 0), "h", ctx, Traffic()))
    worker.setup()
    # a peer that never reads: a listening TCP socket of ours that never speaks ZeroMQ, so no
    # message ever leaves the outbox (and no other test can take the port meanwhile)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    endpoint = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
    snapshots = 0
    real = gosgd.arrays_from_state

    def counting(state: Any) -> Any:
        nonlocal snapshots
        snapshots += 1
        return real(state)

    monkeypatch.setattr(gosgd, "arrays_from_state", counting)
    try:
        worker._node.connect({1: endpoint})
        for step in range(100):
            worker.maybe_push(1, step)
        assert worker.pushed <= 2 and snapshots == worker.pushed  # at most two copies queued
        assert worker._node.traffic.dropped["send_queue_full"] == 100 - worker.pushed
        assert worker.alpha == pytest.approx(0.5 / 2**worker.pushed)  # kept when not sent
    finally:
        worker.close()
        silent.close()


def test_b5_a_stop_during_data_loading_is_not_a_data_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = tmp_path / "data_batch_1"
    batch.write_bytes(pickle.dumps({"data": [], "labels": []}))

    def interrupted(self: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the loader runs
        return {}

    monkeypatch.setattr(cifar.SafeUnpickler, "load", interrupted)
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with pytest.raises(Terminated):  # not DataError("... is not a CIFAR batch: SIGTERM")
            cifar.read_batch(batch)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    assert not issubclass(Terminated, Exception)


@pytest.mark.timeout(240)
def test_b6_a_second_sigterm_does_not_cut_the_clean_up_short(tmp_path: Path) -> None:
    launch = Launch(_recipe(tmp_path, epochs=100_000, slowdown=3.0), tmp_path / "runs")
    try:
        launch.wait_epochs(3)
        run_id, pids = launch.manifest()["run_id"], launch.pids()
        os.kill(pids[2], signal.SIGSTOP)  # it cannot exit on SIGTERM: clean-up waits for it
        os.kill(launch.proc.pid, signal.SIGTERM)  # what systemd, docker stop or timeout send
        # the others are gone: the launcher is in its clean-up, waiting out worker 2
        wait_until(lambda: not any(_alive(pids[i]) for i in (0, 1)), 30, "workers 0 and 1 exit")
        os.kill(launch.proc.pid, signal.SIGTERM)  # ... and the second one, right then
        code, _ = launch.finish(timeout=60)
    finally:
        launch.kill()
    assert code == 130, launch.stderr
    assert "Traceback" not in launch.stderr
    manifest = launch.manifest()
    assert manifest["status"] == "interrupted" and manifest["end_time"]
    assert not _alive(pids[2])  # killed in the clean-up, not left stopped
    assert edgetrain_processes(run_id) == {}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_b7_a_coordinator_that_cannot_bind_is_one_line_and_a_failed_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    setup = prepare(LaunchRequest(_recipe(tmp_path), runs_root=tmp_path / "runs"))
    setup.opts = dataclasses.replace(setup.opts, bind_host="203.0.113.9")  # not this machine's
    with pytest.raises(BindError) as exc:
        api.execute(setup)
    assert "coordinator cannot bind to address '203.0.113.9'" in str(exc.value)
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value)
    manifest = json.loads(setup.run_dir.manifest.read_text())
    assert manifest["status"] == "failed" and "203.0.113.9" in manifest["error"]


def test_b11_each_run_logs_to_its_own_launcher_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runs = []
    for name in ("first", "second"):
        setup = prepare(LaunchRequest(_recipe(tmp_path, name, epochs=1), runs_root=tmp_path / "r"))
        outcome = api.execute(setup)
        assert outcome.status == "completed", outcome.error
        runs.append((setup.run_dir.path, json.loads(setup.run_dir.manifest.read_text())["run_id"]))
    (first, first_id), (second, second_id) = runs
    first_log = (first / "logs" / "launcher.log").read_text()
    second_log = (second / "logs" / "launcher.log").read_text()
    assert f"run {first_id}" in first_log and second_id not in first_log
    assert f"run {second_id}" in second_log and first_id not in second_log


def test_b14_the_live_bar_never_moves_back_on_resume() -> None:
    recipe = parse_recipe({"train": {"epochs": 10}, "workers": [{"count": 1}]})
    live = LiveProgress(recipe, assign_roles(["trainer"]), Console(file=io.StringIO()))
    live.on_event(Event(0, "ready", {"steps_per_epoch": 20}), 0.0)
    # resumed after epoch 5: the step counter restarts at 0, the epoch does not
    live.on_event(Event(0, "progress", {"epoch": 6, "epoch_step": 3, "step": 3, "loss": 1.0}), 1)
    assert live.completed[0] == 5 * 20 + 3
    live.on_event(Event(0, "epoch", {"epoch": 6}), 2.0)
    live.on_event(Event(0, "progress", {"epoch": 6, "epoch_step": 19, "step": 19}), 3.0)
    assert live.completed[0] == 6 * 20  # not back to 5 x 20 + 19


def test_b10_worker_side_a_new_drain_directive_replaces_the_old(ctx: zmq.Context) -> None:
    from edgetrain.comm.client import CoordinatorClient

    recipe = parse_recipe({"workers": [{"count": 2}]})
    client = CoordinatorClient(ctx, "tcp://127.0.0.1:9", 0, "run", Traffic())
    wctx = WorkerContext(recipe, "run", 0, Role("trainer", 0), "h", ctx, Traffic())
    start = Message(protocol.START, protocol.COORDINATOR, "run", meta={"roster": {}, "seq": 1})
    session = Session(client, wctx, start)
    failed: list[set[int]] = []
    session.on_failed(failed.append)
    drain = {"directive": {"expect_from": {"1": 2}}}
    client.on_message(Message(protocol.PEERS, "coordinator", "run", meta={"failed": [1]}))  # type: ignore[misc]
    client.on_message(Message(protocol.DRAIN, "coordinator", "run", meta=drain))  # type: ignore[misc]
    assert failed == [{1}] and session.drain_updates == 1
    assert session.drain_directive == {"expect_from": {"1": 2}}
    client.close()
