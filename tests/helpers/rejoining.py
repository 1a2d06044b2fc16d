"""What the rejoin tests share (``tests/test_rejoin.py``, ``tests/test_join.py``): a gated
environment (workers train slowly until the test opens the gate), a gossip recipe over three
ssh hosts, and finding a worker's own process behind its launcher."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes
from tests.helpers.sshd import Sshd

REPO = Path(__file__).resolve().parents[2]

# three gossip workers, one per ssh host, slowed so that a restart finds the run training
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
slowdown = 25
"""


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


def ssh_launch(tmp_path: Path, sshd: Sshd, run_keys: str) -> Launch:
    """:data:`SSH_RECIPE` (``run_keys``: more ``[run]`` lines) launched on three ssh hosts
    ``h0``-``h2``, one worker each."""
    from tests.test_ssh_launch import _hosts_toml, _venv_links

    (tmp_path / "recipe.toml").write_text(SSH_RECIPE.format(run=run_keys))
    pythons = [f"{link}/bin/python" for link in _venv_links(tmp_path, 3)]
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(_hosts_toml(sshd, pythons, [1, 1, 1]))
    return Launch(tmp_path / "recipe.toml", tmp_path / "runs", "--hosts", str(hosts))


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
