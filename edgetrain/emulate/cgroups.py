"""cgroup v1 groups for emulated hosts: a CPU quota (and a memory limit) that every process
started in the group inherits. Groups live under ``edgetrain-emulate/<testbed>/<host>`` of the
``cpu`` and ``memory`` hierarchies; nothing else is touched."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

CGROUP_ROOT = Path(os.environ.get("EDGETRAIN_CGROUP_ROOT", "/sys/fs/cgroup"))
TOP = "edgetrain-emulate"
CFS_PERIOD_US = 100_000  # the kernel's default; shorter periods lose a larger part of
# small quotas to throttling latency (measured: 0.25 of a core gave 0.19 at 20 ms)
MIN_QUOTA_US = 1000
# CPU weight (cpu.shares) of one core of quota. A quota caps a host but guarantees nothing: with
# other load on the machine each host also gets a weight in proportion to its quota, and the
# testbed's group a weight well above any process outside it, so the hosts keep their ratios
# (and their quotas, while the cores can give them) whatever else runs.
SHARES_PER_CORE = 1024
TESTBED_SHARES = 16 * 1024


class CgroupError(RuntimeError):
    """A cgroup file could not be written."""


def cpu_dir(testbed: str, host: str | None = None) -> Path:
    base = CGROUP_ROOT / "cpu" / TOP / testbed
    return base / host if host else base


def memory_dir(testbed: str, host: str | None = None) -> Path:
    base = CGROUP_ROOT / "memory" / TOP / testbed
    return base / host if host else base


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


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror or exc}") from None


def _mkgroup(d: Path) -> Path:
    try:
        d.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise CgroupError(f"cannot create cgroup {d}: {exc.strerror or exc}") from None
    return d


def create(testbed: str, host: str, cpu: float, memory: int | None) -> list[Path]:
    """Make the host's groups with its CPU quota and memory limit; return their directories."""
    made: list[Path] = []
    cdir = _mkgroup(cpu_dir(testbed, host))
    made.append(cdir)
    for group in (cpu_dir(testbed).parent, cpu_dir(testbed)):  # edgetrain-emulate, the testbed
        _write(group / "cpu.shares", str(TESTBED_SHARES))
    limit(cdir, cpu)
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


def shares(cpu: float) -> int:
    """The CPU weight of a host with ``cpu`` cores of quota (the kernel's minimum is 2)."""
    return max(2, round(SHARES_PER_CORE * cpu))


def limit(group: Path, cpu: float) -> None:
    """Give the CPU group ``group`` a quota of ``cpu`` cores and the matching weight."""
    _write(group / "cpu.cfs_period_us", str(CFS_PERIOD_US))
    _write(group / "cpu.cfs_quota_us", str(max(MIN_QUOTA_US, round(cpu * CFS_PERIOD_US))))
    _write(group / "cpu.shares", str(shares(cpu)))


def set_cpu(testbed: str, host: str, cpu: float) -> None:
    limit(cpu_dir(testbed, host), cpu)


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


def _rmdir(d: Path, problems: list[str]) -> None:
    err = rmdir(d)
    if err is not None:
        problems.append(f"cgroup {d}: {err.strerror or err}")
