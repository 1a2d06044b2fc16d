"""cgroup v1 primitives shared by the launcher and the testbeds: where the hierarchies are,
whether they can be used, a CPU quota, and removing a group.

``edgetrain.launch.cpuquota`` (a local worker's ``[[workers]] cpu``) and
``edgetrain.emulate.cgroups`` (an emulated host's CPU share and memory limit) build on this;
it names neither, so the launcher does not depend on the emulator."""

from __future__ import annotations

import os
import time
from pathlib import Path

CGROUP_ROOT = Path(os.environ.get("EDGETRAIN_CGROUP_ROOT", "/sys/fs/cgroup"))
CFS_PERIOD_US = 100_000  # the kernel's default; shorter periods lose a larger part of
# small quotas to throttling latency (measured: 0.25 of a core gave 0.19 at 20 ms)
MIN_QUOTA_US = 1000
# CPU weight (cpu.shares) of one core of quota. A quota caps a group but guarantees nothing:
# with other load on the machine each group also gets a weight in proportion to its quota.
SHARES_PER_CORE = 1024


class CgroupError(RuntimeError):
    """A cgroup file could not be written."""


def cgroups_unavailable(need_memory: bool) -> str | None:
    """Why the cgroup v1 controllers cannot be used here, or None."""
    if not (CGROUP_ROOT / "cpu" / "cpu.cfs_quota_us").is_file():
        return (
            f"cgroup v1 cpu controller not mounted at {CGROUP_ROOT / 'cpu'} "
            "(the CPU shares need cpu.cfs_quota_us)"
        )
    if need_memory and not (CGROUP_ROOT / "memory" / "memory.limit_in_bytes").is_file():
        return f"cgroup v1 memory controller not mounted at {CGROUP_ROOT / 'memory'}"
    return None


def write(path: Path, value: str) -> None:
    """Write one cgroup file; raise :class:`CgroupError` naming it."""
    try:
        path.write_text(value)
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror or exc}") from None


def shares(cpu: float) -> int:
    """The CPU weight of a group with ``cpu`` cores of quota (the kernel's minimum is 2)."""
    return max(2, round(SHARES_PER_CORE * cpu))


def quota_files(cpu: float, period_us: int = CFS_PERIOD_US) -> dict[str, str]:
    """What :func:`limit` writes, file by file, in order: the period first (the kernel checks
    a quota against the period already set), the quota of ``cpu`` cores of it, the weight."""
    return {
        "cpu.cfs_period_us": str(period_us),
        "cpu.cfs_quota_us": str(max(MIN_QUOTA_US, round(cpu * period_us))),
        "cpu.shares": str(shares(cpu)),
    }


def limit(group: Path, cpu: float, period_us: int = CFS_PERIOD_US) -> None:
    """Give the CPU group ``group`` a quota of ``cpu`` cores every ``period_us`` microseconds
    and the matching weight."""
    for name, value in quota_files(cpu, period_us).items():
        write(group / name, value)


def rmdir(d: Path, timeout: float = 2.5) -> OSError | None:
    """Remove the empty group ``d`` (gone already is fine), retrying for up to ``timeout``
    seconds; the last error, or None."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            d.rmdir()
            return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            if time.monotonic() >= deadline:
                return exc
            time.sleep(0.05)  # a just-killed process may still be leaving the group
