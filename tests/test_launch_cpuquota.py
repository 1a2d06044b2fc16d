"""``[[workers]] cpu``: a local worker in its own cgroup v1 CPU group. Bad uses are one line and
exit 2 with nothing written; a process started by the launcher's command runs in the group from
its first instruction, and the group goes once it has exited. The end-to-end run (EdgeGossip's
balancer against a real quota) is in test_edgegossip_run.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from edgetrain.launch import cpuquota
from tests.helpers.cli import last_error, run_cli
from tests.helpers.skips import skip_or_fail

RECIPE = """
[run]
name = "q"
checkpoint_every = 0
[data]
dataset = "digits"
[train]
family = "gossip"
technique = "gosgd"
epochs = 1
[[workers]]
count = 1
[[workers]]
count = 1
cpu = {cpu}
"""


def _launch(tmp_path: Path, capsys: pytest.CaptureFixture[str], cpu: str, *args: str) -> str:
    recipe = tmp_path / "q.toml"
    recipe.write_text(RECIPE.format(cpu=cpu))
    runs = tmp_path / "runs"
    code, _, err = run_cli(capsys, "launch", str(recipe), "--runs-root", str(runs), *args)
    assert code == 2, err
    assert not runs.exists()  # checked before anything was written
    return last_error(err)


def test_a_cpu_quota_with_ssh_hosts_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _launch(tmp_path, capsys, "0.5", "-H", "127.0.0.1:2")
    assert line.startswith("error: [[workers]] cpu limits local workers only")
    assert "remove cpu from the recipe or launch without hosts" in line


def test_a_cpu_quota_without_cgroups_names_the_reason_and_the_alternative(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpuquota, "unavailable", lambda: "creating cgroups needs root")
    line = _launch(tmp_path, capsys, "0.5")
    assert line.startswith("error: [[workers]] cpu needs a cgroup per worker")
    assert "here creating cgroups needs root" in line and "slowdown instead" in line


def test_a_cpu_quota_must_be_positive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _launch(tmp_path, capsys, "0")
    assert "cpu" in line and "greater than 0" in line


def test_the_start_command_enters_the_group_before_running_the_worker() -> None:
    group = Path("/sys/fs/cgroup/cpu/edgetrain-local/r1/worker-3")
    argv = cpuquota.command(group, ["python", "-m", "edgetrain", "worker"])
    assert argv == [
        "/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(group),
        "python", "-m", "edgetrain", "worker",
    ]  # fmt: skip


@pytest.mark.system
@pytest.mark.timeout(60)
def test_a_process_runs_under_its_quota_and_its_group_goes_after_it() -> None:
    if os.geteuid() != 0:
        skip_or_fail("cgroup groups need root")
    why = cpuquota.unavailable()
    if why is not None:
        skip_or_fail(why)
    run_id = f"test-{os.getpid()}"
    group = cpuquota.create(run_id, 1, 0.25)
    try:
        assert (group / "cpu.cfs_quota_us").read_text().strip() == "25000"
        assert (group / "cpu.cfs_period_us").read_text().strip() == "100000"
        done = subprocess.run(
            cpuquota.command(group, ["cat", "/proc/self/cgroup"]),
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        cpu_line = next(x for x in done.stdout.splitlines() if ":cpu," in x or ":cpu:" in x)
        assert cpu_line.endswith(f"/edgetrain-local/{run_id}/worker-1")
    finally:
        assert cpuquota.remove(group)
    assert not group.exists() and not group.parent.exists()  # the run's group went with it
