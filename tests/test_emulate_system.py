"""A real 3-host testbed: up with --verify, ssh into each host, launch across it, status,
down leaving nothing behind; and a failed ``up`` rolling back (root, netns, sshd, cgroups)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgetrain.emulate import cgroups, sshd, testbed
from edgetrain.emulate.spec import load_spec
from edgetrain.emulate.topology import gateway_dev, owned_namespace
from edgetrain.launch.hosts import load_hosts
from edgetrain.launch.ssh import ssh_command
from tests.helpers.skips import skip_or_fail

pytestmark = [pytest.mark.system, pytest.mark.slow]

SPEC = """
name = "{name}"
description = "CI: two sites, three hosts"
wan = "100mbit"

[[sites]]
name = "a"
lan = "200mbit"

[[sites.hosts]]
name = "h1"
cpu = 0.5
workers = 1

[[sites.hosts]]
name = "h2"
cpu = 0.25
memory = "1g"

[[sites]]
name = "b"
lan = "1gbit"

[[sites.hosts]]
name = "h3"
cpu = 0.25
access = "30mbit"
"""

RECIPE = """
[run]
name = "emulated"
seed = 3
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
epochs = 2
batch_size = 32
lr = 0.05
[gossip]
probability = 0.3
[[workers]]
count = 3
"""

EDGEGOSSIP = """
[run]
name = "eg-emulated"
seed = 3
checkpoint_every = 0
[data]
dataset = "mnist"
root = "{root}"
[model]
name = "lenet5"
[train]
family = "gossip"
technique = "edgegossip"
epochs = 4
batch_size = 16
lr = 0.01
[edgegossip]
calibrate_s = 0.5
[[workers]]
count = 3
"""


@pytest.fixture(autouse=True)
def _need_root_features() -> None:
    reason = testbed.requirements_unavailable()
    if reason is not None:
        skip_or_fail(reason)


def _name(tag: str) -> str:
    return f"ci{os.getpid() % 100000}{tag}"


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgetrain", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _leftovers(name: str, state: Path) -> list[str]:
    left = [f"namespace {n}" for n in testbed.namespaces() if owned_namespace(name, n)]
    if subprocess.run(["ip", "link", "show", "dev", gateway_dev(name)],
                      capture_output=True).returncode == 0:  # fmt: skip
        left.append("gateway veth")
    left += [f"cgroup {d}" for d in cgroups.testbed_dirs(name)]
    if (state / name).exists():
        left.append("state directory")
    return left


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    name = _name("v")
    spec = tmp_path / "bed.toml"
    spec.write_text(SPEC.format(name=name))
    state = tmp_path / "state"
    yield name, spec, state
    testbed.down(name, state)  # whatever the test did, nothing stays


def test_up_verify_ssh_launch_status_down(
    bed: tuple[str, Path, Path], tmp_path: Path, mnist_test_dir: Path
) -> None:
    name, spec, state = bed
    up = _cli("emulate", "up", str(spec), "--verify", "--cpu-seconds", "1",
              "--state-dir", str(state), "--format", "json", timeout=300)  # fmt: skip
    assert up.returncode == 0, up.stderr + up.stdout
    data = json.loads(up.stdout)
    checks = {(r["kind"], r["label"]): r for r in data["verify"]["links"]}
    assert set(checks) == {("lan", "a"), ("access", "h3"), ("wan", "a uplink")}
    assert all(r["ok"] for r in checks.values()), checks
    assert checks["access", "h3"]["measured_bps"] < 33e6 < checks["wan", "a uplink"][
        "measured_bps"] < 110e6 < checks["lan", "a"]["measured_bps"]  # fmt: skip
    shares = {r["host"]: r for r in data["verify"]["cpus"]}
    assert all(r["ok"] for r in shares.values()), shares
    assert shares["h2"]["cgroup"].endswith(f"edgetrain-emulate/{name}/h2")

    # each host is reached over its own sshd, in its own namespace and cgroup
    hosts, _ = load_hosts(data["hosts_file"])
    tb = testbed.load(name, state)
    for entry in hosts.hosts:
        node = tb.topo.host(entry.label)
        argv = ssh_command(hosts, entry, "ip -4 -o addr show dev eth0; cat /proc/self/cgroup")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr
        assert f"{node.address}/24" in done.stdout
        assert f"/edgetrain-emulate/{name}/{node.name}" in done.stdout

    # the gossip demo across the emulated hosts, over ssh
    (tmp_path / "recipe.toml").write_text(RECIPE)
    run = _cli("launch", str(tmp_path / "recipe.toml"), "--hosts", data["hosts_file"],
               "--runs-root", str(tmp_path / "runs"), "--format", "json", "--quiet-logs",
               timeout=400)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-2000:]
    summary = json.loads(run.stdout)
    assert summary["status"] == "completed"
    assert [w["status"] for w in summary["workers"]] == ["completed"] * 3
    (run_dir,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [w["host"] for w in manifest["workers"]] == ["h1", "h2", "h3"]
    assert [w["site"] for w in manifest["workers"]] == ["a", "a", "b"]

    # EdgeGossip across the hosts: h2 and h3 have half h1's CPU quota (a cgroup, not a sleep),
    # so the balancer gives them less than their shard in every epoch, and the median epoch's
    # spread stays under the 2x an unbalanced run has. Epochs here last about a second and
    # their shares follow the last epoch's noise: median spreads measured 1.4-1.6 and single
    # epochs up to 2.09 on this 2-core machine, so the 1.5x is not asserted here.
    # A slow host's share is below its shard (0.8) and never starved (0.1): single epochs
    # measured 0.246 after a noisy previous epoch in CI, so 0.25 was too tight a floor
    (tmp_path / "eg.toml").write_text(EDGEGOSSIP.format(root=mnist_test_dir))
    run = _cli("launch", str(tmp_path / "eg.toml"), "--hosts", data["hosts_file"],
               "--runs-root", str(tmp_path / "eg-runs"), "--format", "json", "--quiet-logs",
               timeout=400)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-2000:]
    eg = json.loads(run.stdout)
    assert eg["status"] == "completed" and eg["technique"] == "edgegossip"
    epochs = eg["technique_report"]["epochs"]
    for epoch in epochs:
        ratio = {int(w): r for w, r in epoch["ratio"].items()}
        assert ratio[0] == 1.0 and all(0.1 < ratio[w] < 0.8 for w in (1, 2)), epoch
    assert statistics.median(e["spread"] for e in epochs) < 2.0, epochs

    status = _cli("emulate", "status", name, "--state-dir", str(state), "--format", "json")
    assert status.returncode == 0, status.stderr
    live = json.loads(status.stdout)["testbeds"][0]["hosts"]
    assert all(h["sshd"] for h in live.values())
    assert live["h3"]["cpu_now"] == pytest.approx(0.25)
    pids = [h["sshd_pid"] for h in live.values()]

    again = _cli("emulate", "up", str(spec), "--state-dir", str(state))
    assert again.returncode == 2 and "already up" in again.stderr

    down = _cli("emulate", "down", name, "--state-dir", str(state))
    assert down.returncode == 0, down.stderr
    assert "removed 4 namespaces" in down.stdout
    assert _leftovers(name, state) == []
    assert not any(sshd.alive(p) for p in pids)
    twice = _cli("emulate", "down", name, "--state-dir", str(state))
    assert twice.returncode == 0 and "nothing to remove" in twice.stdout


def test_failed_up_rolls_back(bed: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    name, spec_path, state = bed
    real_start = sshd.start
    started: list[int] = []

    def start_then_fail(state_: Path, testbed_: str, host: object, timeout: float = 20) -> int:
        if started:
            raise sshd.SshdError("injected: the second sshd does not start")
        started.append(real_start(state_, testbed_, host, timeout))  # type: ignore[arg-type]
        return started[-1]

    monkeypatch.setattr(sshd, "start", start_then_fail)
    with pytest.raises(testbed.EmulateError, match="injected"):
        testbed.up(load_spec(spec_path), state)
    assert started and not sshd.alive(started[0])
    assert _leftovers(name, state) == []
