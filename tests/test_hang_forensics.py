"""A worker that stops heartbeating: its stacks are captured before it is declared lost, and
if it comes back it is told to stop, so the run still ends within its grace (issue 31, items
3 and 6)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes

REPO = Path(__file__).resolve().parents[1]

RECIPE = """
[run]
name = "h"
seed = 3
max_failed_fraction = 0.5
heartbeat_s = 1.0
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
epochs = {epochs}
batch_size = 16
[gossip]
probability = 0.3
[[workers]]
count = 3
"""


def _launch(tmp_path: Path, epochs: int) -> Launch:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE.format(epochs=epochs))
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "EDGETRAIN_PLUGINS": "tests.helpers.hang", "PYTHONPATH": path}
    return Launch(recipe, tmp_path / "runs", env=env)


def _failed(launch: Launch, worker: int) -> dict:
    return launch.wait_event(
        lambda r: r.get("event") == "failed" and r.get("worker") == worker, 30, "it fails"
    )


@pytest.mark.timeout(240)
def test_a_hung_workers_stacks_are_captured_before_it_is_declared_lost(tmp_path: Path) -> None:
    launch = _launch(tmp_path, epochs=100_000)
    try:
        launch.wait_epochs(3)
        run_id, pids = launch.manifest()["run_id"], launch.pids()
        os.kill(pids[2], signal.SIGUSR2)  # stuck in C holding the interpreter lock: no heartbeat
        reason = _failed(launch, 2)["reason"]
        stacks = launch.run_dir / "logs" / "worker-2.stacks"
        assert "stopped heartbeating" in reason
        assert f"its Python stacks are in {stacks}" in reason
        text = stacks.read_text()
        assert "hang_holding_the_gil" in text, text  # the main thread, where it hangs
        assert text.count("Thread 0x") >= 2, text  # and every other thread (the heartbeat's)
        launch.signal(signal.SIGINT)
        code, _ = launch.finish(timeout=60)
    finally:
        launch.kill()
    assert code == 130
    assert edgetrain_processes(run_id) == {}


@pytest.mark.timeout(240)
def test_a_worker_that_hung_and_resumed_is_told_to_stop(tmp_path: Path) -> None:
    launch = _launch(tmp_path, epochs=40)
    try:
        launch.wait_epochs(3)
        run_id, pids = launch.manifest()["run_id"], launch.pids()
        os.kill(pids[2], signal.SIGSTOP)
        _failed(launch, 2)
        os.kill(pids[2], signal.SIGCONT)
        code, summary = launch.finish(timeout=200)
    finally:
        launch.kill()
    assert code == 0, launch.stderr
    assert summary is not None and summary["status"] == "completed"
    rows = {r["event"]: r for r in launch.rows if r.get("worker") is None}
    # stopping takes well under the 30 s the launcher would wait for a worker never told
    assert rows["end"]["t"] - rows["finished"]["t"] < 5.0
    manifest = json.loads((launch.run_dir / "manifest.json").read_text())
    assert manifest["workers"][2]["status"] == "failed"
    assert manifest["workers"][2]["exit_code"] == 0  # it stopped by itself, when told
    assert edgetrain_processes(run_id) == {}


def test_a_stopped_process_is_not_asked_for_its_stacks() -> None:
    """A signal to a stopped worker would be handled when it resumes, beside its running
    threads (a worker resumed that way once crashed with SIGSEGV): the launcher asks no
    stopped process for its stacks."""
    from edgetrain.launch.local import stopped

    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert not stopped(proc.pid)
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not stopped(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stopped(proc.pid)
        os.kill(proc.pid, signal.SIGCONT)
        while stopped(proc.pid) and time.monotonic() < deadline + 10:
            time.sleep(0.01)
        assert not stopped(proc.pid)
    finally:
        proc.kill()
        proc.wait(10)
    assert not stopped(proc.pid)  # gone: /proc cannot say


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _pending(pid: int) -> int:
    """The signals pending for ``pid`` (its own and its group's), as a mask."""
    rows = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(rows["SigPnd"], 16) | int(rows["ShdPnd"], 16)


@pytest.mark.timeout(60)
def test_the_remote_stacks_command_skips_a_stopped_worker() -> None:
    """Over ssh the launcher asks the remote shell's children for their stacks with one shell
    command: a running child gets SIGUSR1, a stopped one nothing (run here by sh, as the
    remote login shell would)."""
    from edgetrain.launch.local import stopped
    from edgetrain.launch.ssh import stacks_script

    shell = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while len(_children(shell.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        halted, running = _children(shell.pid)
        os.kill(halted, signal.SIGSTOP)
        while not stopped(halted) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stopped(halted)
        subprocess.run(["sh", "-c", stacks_script(shell.pid)], check=True, timeout=20)
        while running in _children(shell.pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # sleep dies of SIGUSR1 (its default action): the signal went
        assert running not in _children(shell.pid)
        assert not _pending(halted) & (1 << (signal.SIGUSR1 - 1))  # nothing waits to run
        assert stopped(halted)
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(10)
