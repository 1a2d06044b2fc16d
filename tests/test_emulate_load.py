"""The emulated testbed's CPU ratios hold while the machine is busy: every host's cgroup has a
weight in proportion to its quota and the testbed's group outweighs any process outside it,
so CPU-bound load outside the testbed does not bend the shares (measured: without the weights,
a 0.9-core host was granted 0.65 and ratios were 75-93% off at load average 4)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgetrain.emulate import cgroups, testbed
from tests.helpers.skips import skip_or_fail

pytestmark = [pytest.mark.system, pytest.mark.slow]

SPEC = """
name = "{name}"
[[sites]]
name = "a"
lan = "1gbit"
[[sites.hosts]]
name = "big"
cpu = 0.6
[[sites.hosts]]
name = "small"
cpu = 0.2
"""


@pytest.fixture
def busy() -> Iterator[list[subprocess.Popen[bytes]]]:
    """A CPU-bound process per core, outside the testbed."""
    loops = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(os.cpu_count() or 1)
    ]
    yield loops
    for p in loops:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)


@pytest.mark.timeout(400)
def test_cpu_ratios_hold_under_outside_load(
    tmp_path: Path, busy: list[subprocess.Popen[bytes]]
) -> None:
    reason = testbed.requirements_unavailable()
    if reason is not None:
        skip_or_fail(reason)
    name = f"ld{os.getpid() % 100000}"
    spec = tmp_path / "bed.toml"
    spec.write_text(SPEC.format(name=name))
    state = tmp_path / "state"
    try:
        up = subprocess.run(
            [sys.executable, "-m", "edgetrain", "emulate", "up", str(spec), "--verify",
             "--state-dir", str(state), "--format", "json"],
            capture_output=True, text=True, timeout=360,
        )  # fmt: skip
        assert all(p.poll() is None for p in busy)  # the load ran the whole time
        assert up.returncode == 0, up.stderr + up.stdout[-2000:]
        verify = json.loads(up.stdout)["verify"]
        assert verify["ok"] and verify["busy"] is None
        cpus = {c["host"]: c for c in verify["cpus"]}
        assert abs(cpus["small"]["error"]) <= 0.15
        assert (cgroups.cpu_dir(name, "big") / "cpu.shares").read_text().strip() == "614"
    finally:
        testbed.down(name, state)
