"""The resource sampler inside a real cgroup v1 CPU group, as on an emulated host: load in the
same group is co-running, load elsewhere on the machine (another emulated host) is not, and
the group's demand is a fraction of its quota. Needs root and cgroup v1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from edgetrain.emulate import cgroups
from tests.helpers.skips import skip_or_fail

pytestmark = [pytest.mark.system]

SAMPLER = """
import json, sys, time
from edgetrain.profile.sampler import Sampler
from edgetrain.profile.scope import resolve_scope
scope = resolve_scope("auto")
print(json.dumps({"scope": scope.path if scope else None}), flush=True)
with Sampler(interval_s=0.1, scope=scope) as s:
    for line in sys.stdin:
        since = s.count
        time.sleep(1.5)
        m = s.mean(since)
        print(json.dumps({"co": m.co_cores_busy, "core": m.contention[0], "cores": m.cores,
                          "own": m.own_cores_busy}), flush=True)
"""
BUSY = "import time\nwhile True: pass\n"


def _in_group(group: str, code: str, **popen: object) -> subprocess.Popen[str]:
    procs = cgroups.cpu_dir(*group.split("/")) / "cgroup.procs"
    argv = ["sh", "-c", f'echo $$ > "{procs}" && exec "{sys.executable}" -c "$0"', code]
    return subprocess.Popen(argv, text=True, **popen)  # type: ignore[call-overload]


def _output_in_group(group: str, code: str) -> str:
    """``code``'s stdout, run to its end inside ``group`` (exit 0), its process reaped."""
    proc = _in_group(group, code, stdout=subprocess.PIPE)
    try:
        out, _ = proc.communicate(timeout=100)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0
    return str(out)


@pytest.fixture
def group() -> Iterator[str]:
    if os.geteuid() != 0:
        skip_or_fail("cgroup groups need root")
    reason = cgroups.cgroups_unavailable(need_memory=False)
    if reason is not None:
        skip_or_fail(reason)
    testbed = f"ci{os.getpid() % 100000}scope"
    cgroups.create(testbed, "h", cpu=0.5, memory=None)
    try:
        yield f"{testbed}/h"
    finally:
        cgroups.kill_all(testbed)
        cgroups.remove(testbed)


@pytest.mark.timeout(120)
def test_only_the_groups_own_load_is_co_running(group: str) -> None:
    procs: list[subprocess.Popen[str]] = []
    try:
        outside = subprocess.Popen([sys.executable, "-c", BUSY], text=True)
        procs.append(outside)
        sampler = _in_group(group, SAMPLER, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        procs.append(sampler)
        assert sampler.stdin is not None and sampler.stdout is not None

        def measure() -> dict[str, float]:
            assert sampler.stdin is not None and sampler.stdout is not None
            sampler.stdin.write("go\n")
            sampler.stdin.flush()
            return dict(json.loads(sampler.stdout.readline()))

        head = json.loads(sampler.stdout.readline())
        assert head["scope"].endswith(group)
        quiet = measure()  # a whole core busy elsewhere on the machine: not this host's load
        assert quiet["cores"] == pytest.approx(0.5)
        assert quiet["co"] < 0.05
        procs.append(_in_group(group, BUSY))  # now a co-runner inside the host
        loaded = measure()
        assert 0.2 < loaded["co"] <= 0.55  # it gets (most of) the 0.5-core quota
        assert loaded["core"] >= loaded["co"] / 0.5 - 1e-9  # demand over the quota
    finally:
        for p in procs:
            p.kill()
            p.wait(10)


CONTENTION = """
import json
from edgetrain.models import build_model
from edgetrain.profile.compute import ComputeConfig
from edgetrain.profile.contention import measure_contention
shape = (1, 8, 8)
cfg = ComputeConfig(batch_sizes=(8,), warmup=1, repeats=1)
recs = measure_contention(
    build_model("mlp", shape, 10), shape, cfg, "mlp", [0.0, 1.0], windows=2, window_s=0.5
)
print(json.dumps([[r.level, r.u[0]] for r in recs]), flush=True)
"""


@pytest.mark.timeout(120)
def test_profile_contention_inside_a_host_counts_the_load_it_generates(group: str) -> None:
    """The load generator runs in the profiler's own children, which the group scope leaves
    out of co-running: named as co-running, its demand is U's core component."""
    out = _output_in_group(group, CONTENTION)
    rows = json.loads(out.strip().splitlines()[-1])
    core = {lv: max(u for level, u in rows if level == lv) for lv in (0.0, 1.0)}
    assert core[0.0] < 0.2 and core[1.0] > 1.0  # a core's worth of load per machine core


PROFILE = """
import runpy, sys
sys.argv = ["edgetrain", "profile", "--model", "mlp", "--input", "1x8x8", "--batch-sizes", "8",
            "--threads", "1", "--repeats", "3", "--warmup", "1", "--min-time", "0",
            "--host-name", "h", "--format", "json"]
runpy.run_module("edgetrain", run_name="__main__")
"""


@pytest.mark.timeout(120)
def test_a_profile_inside_a_host_is_sustained_at_its_quota(group: str) -> None:
    """Inside a 0.5-core host the profile finds the quota, times at least 20 periods and
    reports the sustained step beside the burst pace: one thread waits out about half of every
    period, so the mean over the runs is slower than their faster half."""
    out = _output_in_group(group, PROFILE)
    doc = json.loads(out)
    assert doc["cpu_quota"] == {"cores": 0.5, "period_s": 0.1}
    assert doc["throttle_factor"] > 1.0
    assert doc["sustained_step_s"] > doc["step_s"]
