"""Resource sampler: core use, network and disk bytes/s from /proc, machine-wide and co-running.

"Co-running" is everything except the training process (EdgeGossip Table 4): its core use is
the machine's busy time minus the process's own CPU time (``/proc/<pid>/stat``), its disk
traffic the machine's (``/proc/diskstats``, whole disks only, not loop/zram/dm/md devices
stacked on them) minus the process's (``/proc/<pid>/io``). Network traffic
(``/proc/net/dev``, all interfaces but ``lo``) cannot be attributed per process from /proc, so
the co-running network rate is the machine's unless ``own_net_bytes`` (for instance a
:class:`edgetrain.comm.channel.Traffic`'s counters) is given. One sample reads five small
files; at one sample a second that costs well under 1% of a core (``cost_fraction``).

On a saturated machine core *use* is capped at 100% and says nothing about how many processes
compete for the cores, so each sample also counts co-running runnable tasks: ``procs_running``
of ``/proc/stat`` minus the training process's own tasks in state R (``/proc/<pid>/task``).
The contention vector's core component is the co-running CPU *demand*: the larger of the
co-running busy cores and the mean co-running runnable tasks, as a fraction of the cores.

With a :class:`~edgetrain.profile.scope.CgroupScope` (an emulated host's group) the co-running
processes are the group's others instead, their demand a fraction of the group's CPU quota, and
their disk bytes their own ``/proc/<pid>/io``; network bytes are those of the process's own
network namespace, which on an emulated host is the host's.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from edgetrain.profile.scope import CgroupScope, delta, group_counters, io_bytes

log = logging.getLogger(__name__)

_HZ = os.sysconf("SC_CLK_TCK")
_STACKED = ("loop", "ram", "zram", "dm-", "md", "nbd")


@dataclass(frozen=True)
class Snapshot:
    """Raw counters at one moment."""

    t: float
    busy_ticks: int
    total_ticks: int
    net_bytes: int
    disk_bytes: int
    own_ticks: int
    own_disk_bytes: int
    own_net_bytes: int
    co_runnable: int = 0
    # a cgroup scope: CPU ticks and disk bytes of each co-running process of the group
    co_ticks: dict[int, int] | None = None
    co_disk: dict[int, int] | None = None


@dataclass(frozen=True)
class Usage:
    """Rates between two snapshots. ``co_*`` exclude the training process."""

    interval_s: float
    cores: float  # the scope's cores: the machine's, or a cgroup's CPU quota
    machine_cores_busy: float
    own_cores_busy: float
    co_cores_busy: float
    net_Bps: float
    co_net_Bps: float
    disk_Bps: float
    co_disk_Bps: float
    co_runnable: float = 0.0
    own_net_Bps: float = 0.0  # the training process's own traffic (``own_net_bytes``)
    own_disk_Bps: float = 0.0

    @property
    def co_demand(self) -> float:
        """Co-running CPU demand in cores: busy cores, or runnable tasks when saturated."""
        return max(self.co_cores_busy, self.co_runnable)

    @property
    def contention(self) -> tuple[float, float, float]:
        """EdgeGossip's U: (co-running core demand / cores, co-running net B/s, disk B/s)."""
        return (self.co_demand / self.cores, self.co_net_Bps, self.co_disk_Bps)


def _cpu_ticks(root: Path) -> tuple[int, int, int]:
    """Busy and total ticks of all cores, and the number of runnable tasks now."""
    lines = (root / "stat").read_text().splitlines()
    vals = [int(v) for v in lines[0].split()[1:9]]  # user nice system idle iowait irq sirq steal
    idle = vals[3] + vals[4]
    running = next((int(x.split()[1]) for x in lines if x.startswith("procs_running")), 0)
    return sum(vals) - idle, sum(vals), running


def _own_running(root: Path, pid: int) -> int:
    n = 0
    for task in (root / str(pid) / "task").iterdir():
        try:
            if (task / "stat").read_text().rsplit(")", 1)[1].split()[0] == "R":
                n += 1
        except (OSError, IndexError):
            continue
    return n


def _net_bytes(root: Path) -> int:
    total = 0
    for line in (root / "net" / "dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            continue
        cols = rest.split()
        total += int(cols[0]) + int(cols[8])
    return total


def _disk_bytes(root: Path) -> int:
    total = 0
    for line in (root / "diskstats").read_text().splitlines():
        cols = line.split()
        if len(cols) < 10 or cols[2].startswith(_STACKED) or not _whole_disk(cols[2]):
            continue
        total += (int(cols[5]) + int(cols[9])) * 512  # sectors read, sectors written
    return total


def _whole_disk(name: str) -> bool:
    return Path("/sys/block", name).exists()


def _own(root: Path, pid: int) -> tuple[int, int]:
    stat = (root / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(stat[11]) + int(stat[12])  # utime, stime
    return ticks, io_bytes(root, pid)


def snapshot(
    pid: int,
    own_net_bytes: int = 0,
    root: Path = Path("/proc"),
    scope: CgroupScope | None = None,
    co_pids: Iterable[int] = (),
) -> Snapshot:
    """Read the counters now (``pid``: the training process; ``scope``: its cgroup, whose
    other processes are then the co-running ones, with ``co_pids`` of its own children)."""
    busy, total, running = _cpu_ticks(root)
    own_ticks, own_disk = _own(root, pid)
    if scope is not None:
        group = group_counters(scope, pid, root, co_pids=co_pids)
        return Snapshot(
            t=time.monotonic(),
            busy_ticks=busy,
            total_ticks=total,
            net_bytes=_net_bytes(root),
            disk_bytes=own_disk + sum(group.disk.values()),
            own_ticks=own_ticks,
            own_disk_bytes=own_disk,
            own_net_bytes=own_net_bytes,
            co_runnable=group.runnable,
            co_ticks=group.ticks,
            co_disk=group.disk,
        )
    co_runnable = max(running - _own_running(root, pid), 0)
    return Snapshot(
        t=time.monotonic(),
        busy_ticks=busy,
        total_ticks=total,
        net_bytes=_net_bytes(root),
        disk_bytes=_disk_bytes(root),
        own_ticks=own_ticks,
        own_disk_bytes=own_disk,
        own_net_bytes=own_net_bytes,
        co_runnable=co_runnable,
    )


def usage(a: Snapshot, b: Snapshot, cores: float, hz: int = _HZ) -> Usage:
    """Rates from snapshot ``a`` to the later ``b`` (pure)."""
    dt = max(b.t - a.t, 1e-9)
    own = (b.own_ticks - a.own_ticks) / hz / dt
    net = (b.net_bytes - a.net_bytes) / dt
    own_net = (b.own_net_bytes - a.own_net_bytes) / dt
    own_disk = (b.own_disk_bytes - a.own_disk_bytes) / dt
    if a.co_ticks is not None and b.co_ticks is not None:
        # a cgroup scope: co-running = the group's other processes
        co = delta(a.co_ticks or {}, b.co_ticks or {}) / hz / dt
        co_disk = delta(a.co_disk or {}, b.co_disk or {}) / dt
        machine, disk = own + co, own_disk + co_disk
    else:
        dticks = max(b.total_ticks - a.total_ticks, 1)
        machine = cores * (b.busy_ticks - a.busy_ticks) / dticks
        co = min(max(machine - own, 0.0), float(cores))
        disk = (b.disk_bytes - a.disk_bytes) / dt
        co_disk = max(disk - own_disk, 0.0)
    return Usage(
        interval_s=dt,
        cores=cores,
        machine_cores_busy=machine,
        own_cores_busy=own,
        co_cores_busy=co,
        net_Bps=net,
        co_net_Bps=max(net - own_net, 0.0),
        disk_Bps=disk,
        co_disk_Bps=co_disk,
        co_runnable=float(b.co_runnable),
        own_net_Bps=own_net,
        own_disk_Bps=own_disk,
    )


class Sampler:
    """Samples once per ``interval_s`` in a daemon thread; use as a context manager.

    ``interval_s`` may be changed while it runs (it takes effect after the next sample)."""

    def __init__(
        self,
        pid: int | None = None,
        interval_s: float = 1.0,
        own_net_bytes: Callable[[], int] | None = None,
        scope: CgroupScope | None = None,
        co_pids: Callable[[], Iterable[int]] | None = None,
    ) -> None:
        self.pid = pid or os.getpid()
        self.co_pids = co_pids or (lambda: ())
        self.interval_s = interval_s
        self.scope = scope
        share = scope.share() if scope is not None else None
        self.cores: float = share or float(os.cpu_count() or 1)
        self.own_net = own_net_bytes or (lambda: 0)
        self.samples: list[Usage] = []
        self.cost_s = 0.0  # CPU time the sampler thread spent sampling
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="edgetrain-sampler", daemon=True)
        self._start_wall = 0.0

    def __enter__(self) -> Sampler:
        self._start_wall = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        prev = snapshot(self.pid, self.own_net(), scope=self.scope, co_pids=self.co_pids())
        while not self._stop.wait(self.interval_s):
            c0 = time.thread_time()
            try:
                cur = snapshot(self.pid, self.own_net(), scope=self.scope, co_pids=self.co_pids())
            except OSError as exc:  # the process ended
                log.info("sampler stopped: %s", exc)
                return
            with self._lock:
                self.samples.append(usage(prev, cur, self.cores))
            prev = cur
            self.cost_s += time.thread_time() - c0

    @property
    def cost_fraction(self) -> float:
        """The sampler's CPU time over the wall time it ran (fraction of one core)."""
        wall = time.monotonic() - self._start_wall
        return self.cost_s / wall if wall > 0 else 0.0

    @property
    def count(self) -> int:
        """Samples taken so far."""
        with self._lock:
            return len(self.samples)

    def mean(self, since: int = 0) -> Usage | None:
        """The rates over the samples so far, from sample number ``since`` on (None: none):
        each rate weighted by its sample's interval, so the rate over the whole span.

        The co-running network and disk rates are the span's total less the process's own,
        clipped at zero once over the span, not per sample: the process's own counter and the
        kernel's do not tick together (a 250 kB message counted by one before the other), and
        clipping each short sample's difference at zero would keep every positive skew and
        drop every negative one, reporting the process's own traffic as co-running."""
        with self._lock:
            s = list(self.samples[since:])
        if not s:
            return None
        span = sum(u.interval_s for u in s)
        weights = [u.interval_s / span for u in s] if span > 0 else [1.0 / len(s)] * len(s)

        def avg(attr: str) -> float:
            return float(sum(w * getattr(u, attr) for w, u in zip(weights, s, strict=True)))

        net, own_net = avg("net_Bps"), avg("own_net_Bps")
        disk, own_disk = avg("disk_Bps"), avg("own_disk_Bps")
        return Usage(
            interval_s=span,
            cores=self.cores,
            machine_cores_busy=avg("machine_cores_busy"),
            own_cores_busy=avg("own_cores_busy"),
            co_cores_busy=avg("co_cores_busy"),
            net_Bps=net,
            co_net_Bps=max(net - own_net, 0.0),
            disk_Bps=disk,
            co_disk_Bps=max(disk - own_disk, 0.0),
            co_runnable=avg("co_runnable"),
            own_net_Bps=own_net,
            own_disk_Bps=own_disk,
        )
