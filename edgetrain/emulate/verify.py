"""``emulate up --verify``: measure every link class and every host's CPU share, and check them.

Links are measured with edgetrain's own transport (the link probe of ``edgetrain profile``)
between two host namespaces, outside the hosts' cgroups, so the link and not the host's CPU
share is measured; the rate is goodput (payload bytes), while tbf also counts TCP/IP headers,
so about 4% below the limit is what a perfect link gives. CPU shares are measured through the
real path a worker takes: over ssh into the host, whose sshd runs in the host's cgroup; each
host's throughput, relative to its cores' in the same window, is compared between hosts and
the ratios are checked against the share ratios.
"""

from __future__ import annotations

import json
import math
import os
import select
import shlex
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from edgetrain.emulate import cgroups
from edgetrain.emulate.testbed import EmulateError, Testbed
from edgetrain.emulate.topology import GATEWAY, LinkCheck
from edgetrain.launch.hosts import load_hosts
from edgetrain.launch.ssh_argv import ssh_command

LINK_TOLERANCE = 0.10
CPU_TOLERANCE = 0.15
PROBE = ("-m", "edgetrain.emulate.probes")


@dataclass(frozen=True)
class _Checked:
    """A measured figure against what the spec asked for: ``error`` is the relative
    difference, ``ok`` whether it is within the class's ``tolerance``."""

    tolerance: ClassVar[float]

    @property
    def error(self) -> float:
        raise NotImplementedError

    @property
    def ok(self) -> bool:
        return abs(self.error) <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error, "ok": self.ok}


@dataclass(frozen=True)
class LinkResult(_Checked):
    tolerance: ClassVar[float] = LINK_TOLERANCE

    kind: str
    label: str
    src: str
    dst: str
    limit_bps: int
    measured_bps: float
    rtt_ms: float

    @property
    def error(self) -> float:
        return self.measured_bps / self.limit_bps - 1.0


@dataclass(frozen=True)
class CpuResult(_Checked):
    tolerance: ClassVar[float] = CPU_TOLERANCE

    host: str
    share: float
    ops_per_s: float
    cores: float
    granted: float
    ratio: float
    expected_ratio: float
    cgroup: str

    @property
    def error(self) -> float:
        return self.ratio / self.expected_ratio - 1.0


@dataclass(frozen=True)
class Verification:
    links: list[LinkResult]
    cpus: list[CpuResult]
    baseline_ops_per_s: float
    busy: str | None = None  # why the shares could not be granted: the machine's other load

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.links) and all(r.ok for r in self.cpus)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "link_tolerance": LINK_TOLERANCE,
            "cpu_tolerance": CPU_TOLERANCE,
            "baseline_ops_per_s": self.baseline_ops_per_s,
            "links": [r.to_dict() for r in self.links],
            "cpus": [r.to_dict() for r in self.cpus],
            "busy": self.busy,
        }


def _first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        err = proc.communicate(timeout=10)[1] if proc.stderr else ""
        raise EmulateError(f"link probe server did not start: {err.strip()[-300:]}")
    return line


def measure_link(tb: Testbed, check: LinkCheck, max_transfer_s: float = 1.0) -> LinkResult:
    """Send probe transfers from ``check.src`` to ``check.dst`` and fit the bandwidth."""
    src = tb.topo.host(check.src)
    if check.dst == GATEWAY:  # the launcher's end, in this (root) namespace
        serve = [tb.python, *PROBE, "serve", "--bind", tb.topo.gateway_address]
    else:
        dst = tb.topo.host(check.dst)
        serve = ["ip", "netns", "exec", dst.ns, tb.python, *PROBE, "serve", "--bind", dst.address]
    server = subprocess.Popen(
        serve,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        endpoint = json.loads(_first_line(server, 60))["endpoint"]
        argv = ["ip", "netns", "exec", src.ns, tb.python, *PROBE, "link", "--peer", endpoint]
        done = subprocess.run(
            [*argv, "--max-transfer-s", str(max_transfer_s)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise EmulateError(f"link probe {check.src} -> {check.dst} failed: "
                               f"{done.stderr.strip()[-300:]}")  # fmt: skip
        link = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
    return LinkResult(
        check.kind,
        check.label,
        check.src,
        check.dst,
        check.expected_bps,
        float(link["bandwidth_Bps"]) * 8,
        float(link["rtt_s"]) * 1000,
    )


def _cpu_argv(tb: Testbed, host: str | None, seconds: float, procs: int) -> list[str]:
    """The CPU probe on ``host`` over ssh (inside the host's cgroup, as a worker runs), process
    i on core i; ``host=None`` is the idle-priority filler beside it, here. Each says when it
    is up and reads the time to start at from its standard input."""
    args = ["cpu", "--seconds", str(seconds), "--procs", str(procs), "--pinned",
            "--start-on-stdin"]  # fmt: skip
    if host is None:
        group = cgroups.filler_group(tb.spec.name) / "cgroup.procs"
        cmd = " ".join(shlex.quote(a) for a in [tb.python, *PROBE, *args, "--idle"])
        return ["sh", "-c", f"echo $$ > {shlex.quote(str(group))} && exec {cmd}"]
    hosts, _ = load_hosts(tb.hosts_file)
    entry = next(h for h in hosts.hosts if h.label == host)
    return ssh_command(hosts, entry, " ".join([tb.python, *PROBE, *args]))


def _probe_failed(who: str | None, proc: subprocess.Popen[str], timeout: float) -> EmulateError:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate(timeout=10)
    return EmulateError(f"CPU probe {'on host ' + who if who else 'filler'} failed: "
                        f"{(stderr or stdout or 'no output').strip()[-300:]}")  # fmt: skip


def measure_cpu(tb: Testbed, host: str, seconds: float, lead_s: float = 0.25) -> dict[str, Any]:
    """Run the host's CPU probe and an idle-priority filler on the same cores over the same
    window: both start at an agreed time, ``lead_s`` after both have said they are up (ssh
    connected, Python started), so the window waits for no fixed margin.

    The filler runs only while the host's probe is throttled, so together they measure what
    the cores could do in that window, and the host's part of it is its share, free of the
    machine's drift: ``cores`` = host loops / (host + filler loops) x cores used."""
    procs = min(math.ceil(tb.topo.host(host).cpu), os.cpu_count() or 1)
    limit = seconds * 20 + 60
    runs: dict[str | None, subprocess.Popen[str]] = {}
    out: dict[str | None, Any] = {}
    try:
        for who in (host, None):
            runs[who] = subprocess.Popen(
                _cpu_argv(tb, who, seconds, procs),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        for who, proc in runs.items():  # each says it is up (a bounded wait: ssh may hang)
            ready = _ready_line(proc, limit)
            if ready is None or not ready.startswith("{"):
                raise _probe_failed(who, proc, 10)
        start_at = time.time() + lead_s
        for proc in runs.values():
            assert proc.stdin is not None
            proc.stdin.write(f"{start_at:.6f}\n")
            proc.stdin.flush()
        for who, proc in runs.items():
            stdout, stderr = proc.communicate(timeout=limit)
            if proc.returncode != 0:
                raise EmulateError(f"CPU probe {'on host ' + who if who else 'filler'} failed: "
                                   f"{(stderr or stdout).strip()[-300:]}")  # fmt: skip
            out[who] = json.loads(stdout.strip().splitlines()[-1])
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    mine, filler = out[host]["ops_per_s"], out[None]["ops_per_s"]
    return {
        **out[host],
        "cores": mine / (mine + filler) * procs if mine + filler > 0 else 0.0,
        "core_ops_per_s": (mine + filler) / procs,
    }


def _ready_line(proc: subprocess.Popen[str], timeout: float) -> str | None:
    """The first line ``proc`` prints, or None if it ends or ``timeout`` passes first."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return (proc.stdout.readline() or None) if ready else None


def verify(
    tb: Testbed,
    cpu_seconds: float = 2.0,
    max_transfer_s: float = 1.0,
    rounds: int = 3,
    progress: Callable[[str], None] = lambda _m: None,
) -> Verification:
    """Measure each link class, then each host's CPU share, one at a time.

    A machine's speed can drift by tens of percent within seconds (other tenants of a VM,
    frequency scaling: measured 14-32 M loops/s between runs seconds apart on this
    project's VMs), so raw loop rates of hosts measured at different times do not compare.
    Each host's probe therefore shares its cores with an idle-priority filler over the same
    window (:func:`measure_cpu`); a host's throughput is taken relative to what its cores
    did in that window, and the median over ``rounds`` is checked against the shares.
    """
    links = []
    for check in tb.topo.link_checks():
        progress(f"link {check.kind} {check.label}")
        result = measure_link(tb, check, max_transfer_s)
        if not result.ok:  # other work on the machine only slows a transfer: measure again
            progress(f"link {check.kind} {check.label} (again)")
            again = measure_link(tb, check, max_transfer_s)
            result = max(result, again, key=lambda r: r.measured_bps)
        links.append(result)
    hosts = sorted(tb.topo.hosts, key=lambda h: -h.cpu)
    runs: dict[str, list[dict[str, Any]]] = {h.name: [] for h in hosts}
    try:
        for rnd in range(rounds):
            for h in hosts:
                progress(f"CPU share of {h.name} ({rnd + 1}/{rounds})")
                runs[h.name].append(measure_cpu(tb, h.name, cpu_seconds))
    finally:
        cgroups.remove_filler(tb.spec.name)
    ref = hosts[0]
    ref_cores = statistics.median(r["cores"] for r in runs[ref.name])
    baseline = statistics.median(r["core_ops_per_s"] for rs in runs.values() for r in rs)
    ref_share = min(ref.cpu, runs[ref.name][0]["procs"])
    cpus = []
    for h in tb.topo.hosts:
        mine = runs[h.name]
        cores = statistics.median(r["cores"] for r in mine)
        cpus.append(
            CpuResult(
                host=h.name,
                share=h.cpu,
                ops_per_s=statistics.median(r["ops_per_s"] for r in mine),
                cores=cores,
                granted=statistics.median(r["cpu_share"] for r in mine),
                ratio=cores / ref_cores,
                expected_ratio=min(h.cpu, mine[0]["procs"]) / ref_share,
                cgroup=mine[0]["cgroup"],
            )
        )
    busy = None if all(c.ok for c in cpus) else busy_note(tb.spec.name)
    return Verification(links, cpus, baseline, busy)


def _cpu_ticks() -> dict[int, tuple[int, str]]:
    """Per process outside any testbed: (user + system ticks, command name)."""
    out: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if cgroups.TOP in (entry / "cgroup").read_text():
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry.name)] = (int(fields[11]) + int(fields[12]), name)
    return out


def busy_note(testbed: str, window_s: float = 1.0) -> str | None:
    """One line naming the load that keeps the hosts from their shares, or None when the
    machine is not busy: the load average against the cores, and the processes outside the
    testbed that used the most CPU over ``window_s``."""
    load = float(Path("/proc/loadavg").read_text().split()[0])
    cores = os.cpu_count() or 1
    before = _cpu_ticks()
    time.sleep(window_s)  # (a measurement window, not a wait for an event)
    after = _cpu_ticks()
    tick = os.sysconf("SC_CLK_TCK")
    use = sorted(
        ((after[p][0] - before[p][0]) / tick / window_s, p, after[p][1])
        for p in after
        if p in before
    )[::-1]
    return busy_line(load, cores, use)


def busy_line(load: float, cores: int, use: list[tuple[float, int, str]]) -> str | None:
    """The busy-machine line from the load average, the cores, and each process outside the
    testbed as (cores used, pid, name), busiest first; None when the machine is not busy."""
    outside = sum(u for u, _, _ in use)
    if load <= cores and outside < 0.5:
        return None
    top = ", ".join(f"{name} (pid {pid}, {u:.0%})" for u, pid, name in use[:3] if u >= 0.05)
    return (
        f"the machine is too busy to grant the hosts' shares: load average {load:.1f} on "
        f"{cores} cores, {outside:.1f} cores used outside the testbed"
        + (f" (most: {top})" if top else "")
        + "; measure again on an idle machine"
    )
