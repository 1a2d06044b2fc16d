"""What the rejoin tests share (``tests/test_rejoin.py``, ``tests/test_join.py``,
``tests/test_shard_recovery.py``, ``tests/test_exchange_rejoin.py``): a gated environment
(workers train slowly until the test opens the gate), a gossip recipe over three ssh hosts,
finding a worker's own process behind its launcher, a worker's metric rows, and a fault
injected into a gated run followed to its rejoin and the run's end."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes, kill_all
from tests.helpers.sshd import Sshd

REPO = Path(__file__).resolve().parents[2]

# three gossip workers, one per ssh host, gated so that a restart finds the run training
SSH_RECIPE = """
[run]
name = "rejoin-ssh"
seed = 5
heartbeat_s = 0.5
{run}
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
epochs = 60
batch_size = 16
[gossip]
probability = 0.3
[[workers]]
count = 3
"""


def run_command(command: str, run: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``edgetrain COMMAND RUN ARGV --format json`` in a new process (this checkout's code)."""
    return subprocess.run(
        [sys.executable, "-m", "edgetrain", command, str(run), *argv, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )


def gated_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The launch environment of a gated run (``tests.helpers.gate``) and the gate's file."""
    gate = tmp_path / "gate"
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **os.environ,
        "EDGETRAIN_PLUGINS": "tests.helpers.gate",
        "EDGETRAIN_TEST_GATE": str(gate),  # slow steps until the rejoin, then full speed
        "PYTHONPATH": path,
    }
    return env, gate


def ssh_launch(tmp_path: Path, sshd: Sshd, run_keys: str) -> tuple[Launch, Path]:
    """:data:`SSH_RECIPE` (``run_keys``: more ``[run]`` lines) launched on three ssh hosts
    ``h0``-``h2``, one worker each, gated (ssh passes no environment on: each host's python is
    a script that sets the gate's and then runs the venv's); the launch and the gate's file."""
    from tests.test_ssh_launch import _hosts_toml, _venv_links

    (tmp_path / "recipe.toml").write_text(SSH_RECIPE.format(run=run_keys))
    env, gate = gated_env(tmp_path)
    keys = ("EDGETRAIN_PLUGINS", "EDGETRAIN_TEST_GATE", "PYTHONPATH")
    exports = " ".join(f"{k}={shlex.quote(env[k])}" for k in keys)
    pythons = []
    for link in _venv_links(tmp_path, 3):
        script = tmp_path / f"{link.name}-gated-python"
        script.write_text(f'#!/bin/sh\nexport {exports}\nexec {link}/bin/python "$@"\n')
        script.chmod(0o755)
        pythons.append(str(script))
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(_hosts_toml(sshd, pythons, [1, 1, 1]))
    return Launch(tmp_path / "recipe.toml", tmp_path / "runs", "--hosts", str(hosts)), gate


def worker_pid(run_id: str, worker: int) -> int:
    """The pid of worker ``worker``'s own Python process (not the ssh client before it)."""
    found = [
        pid
        for pid, cmd in edgetrain_processes(run_id).items()
        if f"--worker-id {worker} " in cmd and cmd.split()[0].endswith("/bin/python")
    ]
    assert len(found) == 1, edgetrain_processes(run_id)
    return found[0]


def rejoined_epoch(launch: Launch, worker: int, timeout: float = 120) -> dict[str, Any]:
    """The first epoch ``worker`` reports after it rejoined (the row with its ``rejoin``)."""
    return launch.wait_event(
        lambda r: r.get("event") == "epoch" and r.get("worker") == worker and "rejoin" in r,
        timeout,
        "its first epoch after the rejoin",
    )


def metric_rows(run: Path, worker: int) -> list[dict[str, Any]]:
    """Every event ``worker`` recorded in ``run``'s ``metrics/worker-N.jsonl``."""
    path = run / "metrics" / f"worker-{worker}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _is(row: dict[str, Any], event: str, worker: int) -> bool:
    return bool(row.get("event") == event and row.get("worker") == worker)


@dataclass
class Rejoined:
    """How a run went where a worker was lost and came back."""

    launch: Launch
    run_id: str
    code: int
    summary: dict[str, Any] | None
    joined: dict[str, Any]  # the coordinator's ``joined`` event
    first: dict[str, Any] | None  # the worker's first epoch after it (None: not awaited)

    def assert_completed(self) -> None:
        """The launch exited 0 with a completed run and left no process behind."""
        assert self.code == 0, self.launch.stderr[-3000:]
        assert self.summary is not None and self.summary["status"] == "completed"
        assert edgetrain_processes(self.run_id) == {}


def fault_and_rejoin(
    launch: Launch,
    gate: Path,
    worker: int,
    fault: int,
    ready: list[int],
    first_epoch: bool = True,
    at_epoch: int = 1,
) -> Rejoined:
    """Once each of ``ready`` ended epoch ``at_epoch``, send ``worker``'s process ``fault``;
    wait until the run lost it and took it back (with ``first_epoch``, until its first epoch
    after that), open the gate and wait for the end. Every process of the run is reaped
    whatever happens."""
    run_id = ""
    try:
        for w in ready:
            launch.wait_event(
                lambda r, w=w: _is(r, "epoch", w) and int(r.get("epoch", 0)) >= at_epoch,
                180,
                f"worker {w} ends epoch {at_epoch}",
            )
        run_id, pids = launch.manifest()["run_id"], launch.pids()
        os.kill(pids[worker], fault)
        launch.wait_event(lambda r: _is(r, "failed", worker), 30, f"worker {worker} is lost")
        joined = launch.wait_event(lambda r: _is(r, "joined", worker), 120, "it rejoins")
        first = rejoined_epoch(launch, worker, 120) if first_epoch else None
        gate.touch()
        code, summary = launch.finish(timeout=200)
    finally:
        gate.touch()
        launch.kill()
        if run_id:
            kill_all(edgetrain_processes(run_id))
    return Rejoined(launch, run_id, code, summary, joined, first)
