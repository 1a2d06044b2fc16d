"""A profile under a CPU quota: the quota is found (the process's cgroup or the nearest
ancestor with one, v1 or v2), the timed runs span many quota periods, and the sustained step
(the mean over all runs, the quota's waits included) is reported beside the faster half's
(the burst pace of one unthrottled core)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetrain.models import build_model, layer_specs
from edgetrain.profile.compute import (
    QUOTA_PERIODS,
    ComputeConfig,
    estimate,
    profile_compute,
    timed_runs,
)
from edgetrain.profile.compute_json import compute_fields
from edgetrain.profile.scope import (
    parse_cpu_stat,
    process_quota,
    quota_group,
    read_cpu_stat,
    throttling_delta,
)


def _proc(root: Path, pid: int, cgroup: str) -> Path:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(cgroup)
    return root / "proc"


def _group(d: Path, quota: int | None = None, period: int = 100000) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup.procs").write_text("")
    (d / "cpu.cfs_quota_us").write_text(f"{quota if quota is not None else -1}\n")
    (d / "cpu.cfs_period_us").write_text(f"{period}\n")


def test_the_quota_of_an_ancestor_group_counts_v1(tmp_path: Path) -> None:
    cg = tmp_path / "cgroup"
    _group(cg / "cpu")  # the root: no quota
    _group(cg / "cpu" / "edgetrain-emulate" / "tb" / "laptop-1", 60000, 100000)
    _group(cg / "cpu" / "edgetrain-emulate" / "tb" / "laptop-1" / "session")
    proc = _proc(tmp_path, 7, "1:cpu,cpuacct:/edgetrain-emulate/tb/laptop-1/session\n")
    assert process_quota(7, proc, cg) == pytest.approx((0.6, 0.1))
    proc2 = _proc(tmp_path, 8, "1:cpu,cpuacct:/edgetrain-emulate/tb/laptop-1\n")
    assert process_quota(8, proc2, cg) == pytest.approx((0.6, 0.1))


def test_a_period_of_10_ms_and_no_quota(tmp_path: Path) -> None:
    cg = tmp_path / "cgroup"
    _group(cg / "cpu")
    _group(cg / "cpu" / "a", 5000, 10000)
    _group(cg / "cpu" / "b")
    proc = _proc(tmp_path, 7, "1:cpu:/a\n")
    assert process_quota(7, proc, cg) == pytest.approx((0.5, 0.01))
    proc = _proc(tmp_path, 9, "1:cpu:/b\n")
    assert process_quota(9, proc, cg) is None
    proc = _proc(tmp_path, 10, "1:cpu:/\n0::/\n")  # the root group
    assert process_quota(10, proc, cg) is None


def test_a_container_root_with_cpu_max_v2(tmp_path: Path) -> None:
    cg = tmp_path / "cgroup"
    cg.mkdir()
    (cg / "cgroup.procs").write_text("")
    (cg / "cpu.max").write_text("150000 100000\n")  # docker --cpus 1.5, namespaced root
    proc = _proc(tmp_path, 7, "0::/\n")
    assert process_quota(7, proc, cg) == pytest.approx((1.5, 0.1))
    (cg / "cpu.max").write_text("max 100000\n")
    assert process_quota(7, proc, cg) is None


def test_the_estimator_under_a_quota_is_the_mean_over_all_runs() -> None:
    # 0.6 core at 100 ms: of five 15 ms steps one waits out 40 ms of the period
    times = [0.015, 0.015, 0.055, 0.015, 0.015]
    assert estimate(times) == pytest.approx(0.015)  # the faster half: the unthrottled core
    assert estimate(times, (0.6, 0.1)) == pytest.approx(0.023)  # sustained


def test_under_a_quota_the_runs_span_many_periods() -> None:
    free = ComputeConfig(batch_sizes=(4,), repeats=5, min_time_s=0.5)
    held = ComputeConfig(batch_sizes=(4,), repeats=5, min_time_s=0.5, quota=(0.6, 0.1))
    assert free.timed_s == 0.5 and held.timed_s == pytest.approx(QUOTA_PERIODS * 0.1)
    assert timed_runs(free, 0.01) == 50 and timed_runs(held, 0.01) == 200


def test_a_profile_under_a_quota_reports_the_sustained_step_beside_the_burst_pace() -> None:
    shape = (1, 8, 8)
    model = build_model("mlp", shape, 10)
    specs = layer_specs(model, shape)
    cfg = ComputeConfig(batch_sizes=(4,), warmup=1, repeats=3, min_time_s=0.0, quota=(1.0, 0.01))
    cp = profile_compute(model, specs, shape, cfg)
    # the mean over every run is never below the mean of their faster half
    assert cp.sustained_step_s >= cp.step_s and cp.throttle_factor >= 1.0
    doc = compute_fields("mlp", shape, (4,), cp, "measured")
    assert doc["cpu_quota"] == {"cores": 1.0, "period_s": 0.01}
    assert doc["throttle_factor"] == cp.throttle_factor
    assert doc["sustained_step_s"] == cp.sustained_step_s
    free = profile_compute(model, specs, shape, ComputeConfig(batch_sizes=(4,), min_time_s=0.0))
    out = compute_fields("mlp", shape, (4,), free, "measured")
    assert free.throttle_factor == 1.0 and free.sustained_step_s == free.step_s
    assert out["cpu_quota"] is None and out["sustained_step_s"] == out["step_s"]


def test_the_quota_groups_throttling_is_read_v1_and_v2(tmp_path: Path) -> None:
    v1 = "nr_periods 200\nnr_throttled 50\nthrottled_time 400000000\n"
    v2 = "usage_usec 9\nuser_usec 5\nsystem_usec 4\nnr_periods 10\nnr_throttled 4\n"
    v2 += "throttled_usec 16000\n"
    assert parse_cpu_stat(v1) == {"periods": 200.0, "throttled": 50.0, "throttled_s": 0.4}
    assert parse_cpu_stat(v2) == {"periods": 10.0, "throttled": 4.0, "throttled_s": 0.016}
    assert parse_cpu_stat("usage_usec 9\n") is None  # no quota's counters
    before = {"periods": 100.0, "throttled": 10.0, "throttled_s": 0.1}
    after = {"periods": 300.0, "throttled": 60.0, "throttled_s": 0.5}
    assert throttling_delta(before, after) == pytest.approx(
        {"quota_periods": 200.0, "quota_throttled_share": 0.25, "quota_throttled_s": 0.4}
    )
    assert throttling_delta(before, before) is None and throttling_delta(None, after) is None
    # the group whose quota the process runs under: the nearest ancestor with one
    cg = tmp_path / "cgroup"
    _group(cg / "cpu")
    host = cg / "cpu" / "edgetrain-emulate" / "tb" / "laptop-1"
    _group(host, 60000, 100000)
    _group(host / "session")
    (host / "cpu.stat").write_text(v1)
    proc = _proc(tmp_path, 7, "1:cpu,cpuacct:/edgetrain-emulate/tb/laptop-1/session\n")
    assert quota_group(7, proc, cg) == host
    assert read_cpu_stat(quota_group(7, proc, cg)) == parse_cpu_stat(v1)
    _group(cg / "cpu" / "free")
    assert quota_group(8, _proc(tmp_path, 8, "1:cpu:/free\n"), cg) is None
    assert read_cpu_stat(None) is None
