"""Whose load counts as co-running: the whole machine, or the processes of this one's cgroup.

On an emulated testbed (``edgetrain emulate``) every host is a cgroup v1 ``cpu`` group,
``edgetrain-emulate/<testbed>/<host>``, on one shared machine: the other hosts' training is not
this host's contention, so the co-running processes are the others in the same group (the
host's sshd, a load the test put there, a second worker), and their CPU use is a fraction of
the group's CPU quota, not of the machine's cores. Elsewhere the whole machine is the scope.

``/proc/self/cgroup`` names the group (v1: the hierarchy whose controllers include ``cpu``;
v2: the unified ``0::`` line). Group counters are per process (``/proc/<pid>/stat`` CPU
ticks, ``/proc/<pid>/io`` bytes, ``/proc/<pid>/task/*/stat`` runnable threads) over the group's
``cgroup.procs``, without the sampled process and its descendants: the ``cpu`` hierarchy has
no usage counter of its own when ``cpuacct`` is mounted apart, as on this project's machines.
A process that exits between two samples takes its last ticks with it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# edgetrain.emulate.cgroups.TOP and its root (profile sits below emulate in the layers).
EMULATED_TOP = "edgetrain-emulate"
CGROUP_ROOT = Path(os.environ.get("EDGETRAIN_CGROUP_ROOT", "/sys/fs/cgroup"))
ScopeMode = Literal["auto", "machine", "cgroup"]


def cpu_cgroup(text: str) -> str | None:
    """The CPU cgroup path in ``/proc/<pid>/cgroup`` text (None: the root, or none found)."""
    v1: str | None = None
    v2: str | None = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if "cpu" in controllers.split(","):
            v1 = path
        elif hier == "0" and controllers == "":
            v2 = path
    found = v1 if v1 is not None else v2
    return found if found and found != "/" else None


def is_emulated(path: str) -> bool:
    """True for an emulated host's group (``/edgetrain-emulate/<testbed>/<host>...``)."""
    return path.strip("/").split("/")[0] == EMULATED_TOP


@dataclass(frozen=True)
class CgroupScope:
    """One cgroup: its path, its directory, and the processes and CPU quota in it."""

    path: str
    directory: Path

    def pids(self) -> set[int]:
        """Every process in the group and its sub-groups."""
        found: set[int] = set()
        for procs in self.directory.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                found |= {int(p) for p in procs.read_text().split()}
        return found

    def share(self) -> float | None:
        """The group's CPU quota in cores (None: unlimited or unreadable)."""
        quota = self.quota()
        return quota[0] if quota is not None else None

    def quota(self) -> tuple[float, float] | None:
        """The group's CPU quota as (cores, period in seconds); None: unlimited or unreadable."""
        d = self.directory
        try:
            if (d / "cpu.cfs_quota_us").is_file():
                quota = int((d / "cpu.cfs_quota_us").read_text())
                period = int((d / "cpu.cfs_period_us").read_text())
                return (quota / period, period / 1e6) if quota > 0 and period > 0 else None
            if (d / "cpu.max").is_file():
                limit, _, period_text = (d / "cpu.max").read_text().strip().partition(" ")
                if limit == "max":
                    return None
                period = int(period_text or "100000")
                return (int(limit) / period, period / 1e6) if period > 0 else None
        except (OSError, ValueError, ZeroDivisionError):
            return None
        return None


def group_directory(path: str, root: Path = CGROUP_ROOT) -> Path | None:
    """The directory of cgroup ``path``: under the v1 ``cpu`` mount (alone or with
    ``cpuacct``), else the v2 unified tree."""
    rel = path.strip("/")
    for base in (root / "cpu", root / "cpu,cpuacct", root / "unified", root):
        d = base / rel
        if (d / "cgroup.procs").is_file():
            return d
    return None


def resolve_scope(
    mode: ScopeMode = "auto",
    pid: int | None = None,
    proc_root: Path = Path("/proc"),
    cgroup_root: Path = CGROUP_ROOT,
) -> CgroupScope | None:
    """The cgroup to sample for process ``pid`` (None: the whole machine).

    ``auto``: the process's group if it is an emulated host's, else the machine; ``cgroup``:
    its group whatever it is (the machine when it is in the root group); ``machine``: None."""
    if mode == "machine":
        return None
    try:
        text = (proc_root / str(pid or os.getpid()) / "cgroup").read_text()
    except OSError:
        return None
    path = cpu_cgroup(text)
    if path is None or (mode == "auto" and not is_emulated(path)):
        return None
    directory = group_directory(path, cgroup_root)
    return CgroupScope(path, directory) if directory is not None else None


# ------------------------------------------------------------------ per-process counters


def _stat(proc_root: Path, pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, utime + stime ticks) of a process, or None if it is gone."""
    try:
        fields = (proc_root / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def io_bytes(proc_root: Path, pid: int) -> int:
    """Bytes a process read from and wrote to storage (``/proc/PID/io``; 0 if unreadable)."""
    total = 0
    try:
        for line in (proc_root / str(pid) / "io").read_text().splitlines():
            key, _, val = line.partition(":")
            if key in ("read_bytes", "write_bytes"):
                total += int(val)
    except (OSError, ValueError):
        pass
    return total


def _running_tasks(proc_root: Path, pid: int) -> int:
    n = 0
    with contextlib.suppress(OSError):
        for task in (proc_root / str(pid) / "task").iterdir():
            with contextlib.suppress(OSError, IndexError):
                if (task / "stat").read_text().rsplit(")", 1)[1].split()[0] == "R":
                    n += 1
    return n


def own_tree(pid: int, parents: dict[int, int]) -> set[int]:
    """``pid`` and every process of ``parents`` (child -> parent) descending from it."""
    own = {pid}
    for p in parents:
        seen: set[int] = set()
        q = p
        while q in parents and q not in seen and q != pid:
            seen.add(q)
            q = parents[q]
        if q == pid:
            own.add(p)
    return own


@dataclass(frozen=True)
class GroupCounters:
    """Co-running counters of one group at one moment, per process."""

    ticks: dict[int, int]
    disk: dict[int, int]
    runnable: int


def group_counters(
    scope: CgroupScope,
    pid: int,
    proc_root: Path = Path("/proc"),
    pids: Iterable[int] = (),
    co_pids: Iterable[int] = (),
) -> GroupCounters:
    """CPU ticks and disk bytes of every process in ``scope`` but ``pid``'s tree, and their
    runnable threads now (``pids``: the group's processes, read from it when empty;
    ``co_pids``: processes of ``pid``'s tree that count as co-running all the same, such as
    the load ``profile --contention`` generates in its own children)."""
    members = set(pids) or scope.pids()
    stats = {p: s for p in members if (s := _stat(proc_root, p)) is not None}
    own = own_tree(pid, {p: s[1] for p, s in stats.items()}) - (set(co_pids) - {pid})
    co = {p: s for p, s in stats.items() if p not in own}
    return GroupCounters(
        ticks={p: s[2] for p, s in co.items()},
        disk={p: io_bytes(proc_root, p) for p in co},
        runnable=sum(_running_tasks(proc_root, p) for p in co),
    )


def delta(before: dict[int, int], after: dict[int, int]) -> int:
    """What the processes of ``after`` added since ``before`` (a new process: all of it)."""
    return sum(max(v - before.get(p, 0), 0) for p, v in after.items())


def parse_cpu_stat(text: str) -> dict[str, float] | None:
    """A quota group's ``cpu.stat`` as {periods, throttled periods, throttled seconds}: cgroup
    v1 (``throttled_time`` in ns) or v2 (``throttled_usec``); None without those fields. Pure."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            fields[key] = int(value)
    if "nr_periods" not in fields or "nr_throttled" not in fields:
        return None
    if "throttled_time" in fields:
        seconds = fields["throttled_time"] / 1e9
    elif "throttled_usec" in fields:
        seconds = fields["throttled_usec"] / 1e6
    else:
        return None
    return {
        "periods": float(fields["nr_periods"]),
        "throttled": float(fields["nr_throttled"]),
        "throttled_s": seconds,
    }


def throttling_delta(
    before: dict[str, float] | None, after: dict[str, float] | None
) -> dict[str, float] | None:
    """What a quota group was throttled between two :func:`parse_cpu_stat` readings: the
    periods, the share of them that ran out of quota, and the seconds its tasks were stopped
    for; None where either reading is missing or no period passed. Pure."""
    if before is None or after is None:
        return None
    periods = after["periods"] - before["periods"]
    if periods <= 0:
        return None
    return {
        "quota_periods": periods,
        "quota_throttled_share": (after["throttled"] - before["throttled"]) / periods,
        "quota_throttled_s": after["throttled_s"] - before["throttled_s"],
    }


def quota_group(
    pid: int | None = None,
    proc_root: Path = Path("/proc"),
    cgroup_root: Path = CGROUP_ROOT,
) -> Path | None:
    """The directory of the group whose CPU quota process ``pid`` runs under: its cgroup or
    the nearest ancestor with one (an emulated host's, a container's); None: no quota."""
    scope = resolve_scope("cgroup", pid, proc_root, cgroup_root)
    if scope is not None:
        start = scope.directory
    else:  # the root group, or a container's namespaced root: its own files, if any
        bases = (cgroup_root / "cpu", cgroup_root / "cpu,cpuacct", cgroup_root)
        found = [b for b in bases if (b / "cgroup.procs").is_file()]
        if not found:
            return None
        start = found[0]
    for d in (start, *start.parents):
        if not (d / "cgroup.procs").is_file():
            break
        if CgroupScope(str(d), d).quota() is not None:
            return d
        if d == cgroup_root:
            break
    return None


def read_cpu_stat(group: Path | None) -> dict[str, float] | None:
    """:func:`parse_cpu_stat` of ``group``'s ``cpu.stat`` (None: no group, or unreadable)."""
    if group is None:
        return None
    try:
        return parse_cpu_stat((group / "cpu.stat").read_text())
    except OSError:
        return None


def process_quota(
    pid: int | None = None,
    proc_root: Path = Path("/proc"),
    cgroup_root: Path = CGROUP_ROOT,
) -> tuple[float, float] | None:
    """The CPU quota process ``pid`` runs under, (cores, period seconds), read from
    :func:`quota_group`'s group; None: no quota."""
    group = quota_group(pid, proc_root, cgroup_root)
    return CgroupScope(str(group), group).quota() if group is not None else None
