"""Resource sampler: rates from counters, live /proc readings, and its own cost."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest

from edgetrain.profile.sampler import Sampler, Snapshot, snapshot, usage
from tests.helpers.waiting import wait_until


def _snap(
    t: float, busy: int, total: int, net: int, disk: int, own: int, own_disk: int
) -> Snapshot:
    return Snapshot(t, busy, total, net, disk, own, own_disk, own_net_bytes=0, co_runnable=3)


def test_usage_from_two_snapshots() -> None:
    a = _snap(10.0, 1000, 4000, 5_000, 0, 200, 0)
    b = _snap(12.0, 1300, 4400, 25_000, 8_000, 300, 2_000)  # 2 s, 400 ticks on 2 cores
    u = usage(a, b, cores=2, hz=100)
    assert u.machine_cores_busy == pytest.approx(1.5)  # 300 of 400 ticks busy x 2 cores
    assert u.own_cores_busy == pytest.approx(0.5)  # 100 ticks / 100 Hz / 2 s
    assert u.co_cores_busy == pytest.approx(1.0)
    assert u.net_Bps == pytest.approx(10_000) and u.co_net_Bps == pytest.approx(10_000)
    assert u.disk_Bps == pytest.approx(4_000) and u.co_disk_Bps == pytest.approx(3_000)
    assert u.co_runnable == 3 and u.co_demand == 3
    assert u.contention == pytest.approx((1.5, 10_000, 3_000))


def test_co_running_use_never_negative_nor_above_the_cores() -> None:
    a = _snap(0.0, 0, 100, 0, 0, 0, 0)
    b = _snap(1.0, 10, 200, 0, 0, 90, 500)  # own CPU more than the machine saw (tick skew)
    u = usage(a, b, cores=2, hz=100)
    assert u.co_cores_busy == 0.0 and u.co_disk_Bps == 0.0


def _fs_type(path: Path) -> str:
    best, kind = "", ""
    for line in Path("/proc/mounts").read_text().splitlines():
        _dev, mnt, fstype, *_ = line.split()
        if str(path.resolve()).startswith(mnt) and len(mnt) > len(best):
            best, kind = mnt, fstype
    return kind


def test_live_snapshot_sees_own_cpu_and_disk(tmp_path: Path) -> None:
    a = snapshot(os.getpid())
    c0 = time.process_time()
    x = 0
    while time.process_time() - c0 < 0.3:  # 0.3 s of our own CPU time
        x += 1
    data = os.urandom(2**20)
    with open(tmp_path / "f", "wb") as fh:
        for _ in range(8):
            fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    b = snapshot(os.getpid())
    assert b.own_ticks - a.own_ticks >= 0.2 * os.sysconf("SC_CLK_TCK")
    assert b.busy_ticks >= a.busy_ticks and b.total_ticks > a.total_ticks
    assert b.net_bytes >= a.net_bytes and b.co_runnable >= 0
    if _fs_type(tmp_path) not in ("tmpfs", "ramfs", "overlay"):  # a real block device
        assert b.own_disk_bytes - a.own_disk_bytes >= 8 * 2**20
        assert b.disk_bytes - a.disk_bytes >= 8 * 2**20
    u = usage(a, b, os.cpu_count() or 1)
    assert 0 <= u.co_cores_busy <= (os.cpu_count() or 1)


def test_sampler_thread_is_cheap() -> None:
    with Sampler(interval_s=0.02) as sampler:
        wait_until(lambda: len(sampler.samples) >= 10, 10, "10 samples", every=0.01)
    assert len(sampler.samples) >= 10
    mean = sampler.mean()
    assert mean is not None and mean.cores == (os.cpu_count() or 1)
    per_sample = sampler.cost_s / len(sampler.samples)
    assert per_sample < 0.01  # at one sample a second: under 1% of a core


def test_the_mean_clips_co_running_traffic_once_over_the_span_not_per_sample() -> None:
    """The process's own byte counter and the kernel's tick apart: a 250 kB message is in
    one's count a sample before the other's. Per sample the differences are +/- 2.5 MB/s;
    over the span they cancel, and nothing else used the network."""
    sampler = Sampler(interval_s=0.1)
    snaps = []
    own = net = 0
    for k in range(9):
        snaps.append(Snapshot(k * 0.1, 0, 100 * k, net, 0, 0, 0, own_net_bytes=own, co_runnable=0))
        own += 250_000  # one message a sample on our counter ...
        net += 0 if k % 2 == 0 else 500_000  # ... the kernel's sees two every other sample
    sampler.samples = [usage(a, b, cores=1, hz=100) for a, b in itertools.pairwise(snaps)]
    assert max(u.co_net_Bps for u in sampler.samples) == pytest.approx(2.5e6)
    mean = sampler.mean()
    assert mean is not None
    assert mean.net_Bps == pytest.approx(2.5e6) and mean.own_net_Bps == pytest.approx(2.5e6)
    assert mean.co_net_Bps == pytest.approx(0.0, abs=1e-6)
    assert mean.interval_s == pytest.approx(0.8)
