"""cgroup v1 groups for emulated hosts: a CPU quota (and a memory limit) that every process
started in the group inherits. Groups live under ``edgetrain-emulate/<testbed>/<host>`` of the
``cpu`` and ``memory`` hierarchies; nothing else is touched. The primitives (the root, a quota,
removing a group) are :mod:`edgetrain.cgroups`, which the launcher's CPU quotas share."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from edgetrain.cgroups import CFS_PERIOD_US as CFS_PERIOD_US
from edgetrain.cgroups import CGROUP_ROOT as CGROUP_ROOT
from edgetrain.cgroups import MIN_QUOTA_US as MIN_QUOTA_US
from edgetrain.cgroups import SHARES_PER_CORE as SHARES_PER_CORE
from edgetrain.cgroups import CgroupError as CgroupError
from edgetrain.cgroups import cgroups_unavailable as cgroups_unavailable
from edgetrain.cgroups import limit as limit
from edgetrain.cgroups import rmdir as rmdir
from edgetrain.cgroups import shares as shares
from edgetrain.cgroups import write as _write

TOP = "edgetrain-emulate"
# The testbed's group gets a weight well above any process outside it (each host's weight is
# in proportion to its quota, :func:`shares`), so the hosts keep their ratios (and their
# quotas, while the cores can give them) whatever else runs on the machine.
TESTBED_SHARES = 16 * 1024


def cpu_dir(testbed: str, host: str | None = None) -> Path:
    base = CGROUP_ROOT / "cpu" / TOP / testbed
    return base / host if host else base


def memory_dir(testbed: str, host: str | None = None) -> Path:
    base = CGROUP_ROOT / "memory" / TOP / testbed
    return base / host if host else base


def _mkgroup(d: Path) -> Path:
    try:
        d.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise CgroupError(f"cannot create cgroup {d}: {exc.strerror or exc}") from None
    return d


def create(
    testbed: str, host: str, cpu: float, memory: int | None, period_us: int = CFS_PERIOD_US
) -> list[Path]:
    """Make the host's groups with its CPU quota (``cpu`` cores every ``period_us``) and memory
    limit; return their directories."""
    made: list[Path] = []
    cdir = _mkgroup(cpu_dir(testbed, host))
    made.append(cdir)
    for group in (cpu_dir(testbed).parent, cpu_dir(testbed)):  # edgetrain-emulate, the testbed
        _write(group / "cpu.shares", str(TESTBED_SHARES))
    limit(cdir, cpu, period_us)
    if memory is not None:
        mdir = _mkgroup(memory_dir(testbed, host))
        made.append(mdir)
        _write(mdir / "memory.limit_in_bytes", str(memory))
    return made


FILLER = "_filler"  # '_' is in no host name


def filler_group(testbed: str) -> Path:
    """A group whose processes get a core only when nothing else wants it (the lowest
    ``cpu.shares``, and ``cpu.idle`` where the kernel has it): SCHED_IDLE alone is not
    enough against other groups."""
    d = cpu_dir(testbed, FILLER)
    if not d.is_dir():
        d.mkdir(parents=True)
        _write(d / "cpu.shares", "2")
        if (d / "cpu.idle").exists():
            _write(d / "cpu.idle", "1")
    return d


def remove_filler(testbed: str) -> None:
    d = cpu_dir(testbed, FILLER)
    if d.is_dir():
        signal_all(pids(d), signal.SIGKILL)
        _rmdir(d, [])


def set_cpu(testbed: str, host: str, cpu: float, period_us: int = CFS_PERIOD_US) -> None:
    limit(cpu_dir(testbed, host), cpu, period_us)


def read_cpu(testbed: str, host: str) -> float | None:
    """The host's CPU share now (cores), or None if its group is gone."""
    try:
        quota = int((cpu_dir(testbed, host) / "cpu.cfs_quota_us").read_text())
        period = int((cpu_dir(testbed, host) / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota < 0 else quota / period


def pids(directory: Path) -> set[int]:
    """Every process in ``directory`` and its sub-groups."""
    found: set[int] = set()
    if not directory.is_dir():
        return found
    for procs in directory.rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            found |= {int(p) for p in procs.read_text().split()}
    return found


def testbed_dirs(testbed: str) -> list[Path]:
    return [d for d in (cpu_dir(testbed), memory_dir(testbed)) if d.exists()]


def kill_all(testbed: str, timeout: float = 10.0) -> int:
    """SIGTERM every process in the testbed's groups, SIGKILL what is left; return the count."""
    dirs = testbed_dirs(testbed)
    victims = set().union(*(pids(d) for d in dirs)) if dirs else set()
    signal_all(victims, signal.SIGTERM)
    deadline = time.monotonic() + timeout / 2
    while time.monotonic() < deadline and any(pids(d) for d in dirs):
        time.sleep(0.05)
    left = set().union(*(pids(d) for d in dirs)) if dirs else set()
    signal_all(left, signal.SIGKILL)
    deadline = time.monotonic() + timeout / 2
    while time.monotonic() < deadline and any(pids(d) for d in dirs):
        time.sleep(0.05)
    return len(victims)


def signal_all(pids_: set[int], sig: signal.Signals) -> None:
    for pid in pids_:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def remove(testbed: str) -> list[str]:
    """Remove the testbed's (empty) groups, deepest first; return what could not be removed."""
    problems: list[str] = []
    for base in testbed_dirs(testbed):
        for d in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            _rmdir(d, problems)
        _rmdir(base, problems)
        with contextlib.suppress(OSError):
            base.parent.rmdir()  # edgetrain-emulate itself, once no testbed is left
    return problems


def _rmdir(d: Path, problems: list[str]) -> None:
    err = rmdir(d)
    if err is not None:
        problems.append(f"cgroup {d}: {err.strerror or err}")
