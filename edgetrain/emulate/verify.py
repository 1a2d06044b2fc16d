"""``emulate up --verify``: measure every link class and every host's CPU share, and check them.

Links are measured with edgetrain's own transport (the link probe of ``edgetrain profile``)
between two host namespaces, outside the hosts' cgroups, so the link and not the host's CPU
share is measured; the rate is goodput (payload bytes), while tbf also counts TCP/IP headers,
so about 4% below the limit is what a perfect link gives. CPU shares are measured through the
real path a worker takes: over ssh into the host, whose sshd runs in the host's cgroup; the
throughput ratios between hosts are checked against the share ratios.
"""

from __future__ import annotations

import json
import math
import os
import select
import statistics
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from edgetrain.emulate.testbed import EmulateError, Testbed
from edgetrain.emulate.topology import GATEWAY, LinkCheck
from edgetrain.launch.hosts import load_hosts
from edgetrain.launch.ssh import ssh_command

LINK_TOLERANCE = 0.10
CPU_TOLERANCE = 0.15
PROBE = ("-m", "edgetrain.emulate.probes")
PAIR_LOAD = 0.9  # a pair of probes shares one core while it needs at most this much of it


@dataclass(frozen=True)
class LinkResult:
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

    @property
    def ok(self) -> bool:
        return abs(self.error) <= LINK_TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error, "ok": self.ok}


@dataclass(frozen=True)
class CpuResult:
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

    @property
    def ok(self) -> bool:
        return abs(self.error) <= CPU_TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error, "ok": self.ok}


@dataclass(frozen=True)
class Verification:
    links: list[LinkResult]
    cpus: list[CpuResult]
    baseline_ops_per_s: float

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


def _cpu_argv(tb: Testbed, host: str | None, seconds: float, pin: int | None) -> list[str]:
    """The CPU probe on ``host`` over ssh (inside the host's cgroup, as a worker runs);
    ``host=None`` runs it here, outside every quota (the baseline)."""
    procs = min(math.ceil(tb.topo.host(host).cpu), os.cpu_count() or 1) if host else 1
    args = ["cpu", "--seconds", str(seconds), "--procs", str(procs)]
    if pin is not None:
        args += ["--pin", str(pin)]
    if host is None:
        return [tb.python, *PROBE, *args]
    hosts, _ = load_hosts(tb.hosts_file)
    entry = next(h for h in hosts.hosts if h.label == host)
    return ssh_command(hosts, entry, " ".join([tb.python, *PROBE, *args]))


def measure_cpu(
    tb: Testbed, hosts: list[str | None], seconds: float, pin: int | None = None
) -> dict[str | None, Any]:
    """Run the CPU probe on all of ``hosts`` at once (on CPU ``pin`` only, if given); their
    probe results by host."""
    procs = {
        h: subprocess.Popen(
            _cpu_argv(tb, h, seconds, pin),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for h in hosts
    }
    out: dict[str | None, Any] = {}
    try:
        for h, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=seconds * 20 + 60)
            if proc.returncode != 0:
                raise EmulateError(f"CPU probe on host {h or 'gateway'} failed: "
                                   f"{(stderr or stdout).strip()[-300:]}")  # fmt: skip
            out[h] = json.loads(stdout.strip().splitlines()[-1])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    return out


def verify(
    tb: Testbed,
    cpu_seconds: float = 2.0,
    max_transfer_s: float = 1.0,
    rounds: int = 5,
    progress: Callable[[str], None] = lambda _m: None,
) -> Verification:
    """Measure each link class, one at a time, then the hosts' CPU shares.

    A machine's speed can drift by tens of percent within seconds (other tenants of a VM,
    frequency scaling), so each host's CPU probe runs at the same time as the probe of the
    host with the largest share, both pinned to one core: they see the same drift, and
    neither slows the other as a busy SMT sibling core would. Where the pair's shares do not
    fit one core they run one after the other. The pair's ratio is taken per round and the
    median over ``rounds`` is checked. ``granted`` is
    the CPU time each host's probe got per wall second: the quota itself, free of that drift.
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
    ref = hosts[0]
    ratios: dict[str, list[float]] = {h.name: [] for h in hosts}
    ops: dict[str, list[float]] = {h.name: [] for h in hosts}
    granted: dict[str, list[float]] = {h.name: [] for h in hosts}
    info: dict[str | None, Any] = {}
    progress("CPU baseline, no quota")
    baseline = measure_cpu(tb, [None], cpu_seconds)[None]["ops_per_s"]
    for rnd in range(rounds):
        for h in hosts[1:] or hosts:
            progress(f"CPU share of {h.name} beside {ref.name} ({rnd + 1}/{rounds})")
            pair: list[str | None] = [ref.name] if h is ref else [ref.name, h.name]
            if ref.cpu + h.cpu <= PAIR_LOAD:
                run = measure_cpu(tb, pair, cpu_seconds, pin=0)
            else:  # the pair would compete for cores: one after the other
                run = {n: measure_cpu(tb, [n], cpu_seconds)[n] for n in pair}
            info.update(run)
            for n in pair:
                assert n is not None
                ops[n].append(run[n]["ops_per_s"])
                granted[n].append(run[n]["cpu_share"])
                ratios[n].append(run[n]["ops_per_s"] / run[ref.name]["ops_per_s"])
    cpus = []
    for h in tb.topo.hosts:
        procs = info[h.name]["procs"]
        cpus.append(
            CpuResult(
                host=h.name,
                share=h.cpu,
                ops_per_s=statistics.median(ops[h.name]),
                cores=statistics.median(ops[h.name]) / baseline,
                granted=statistics.median(granted[h.name]),
                ratio=statistics.median(ratios[h.name]),
                expected_ratio=min(h.cpu, procs) / min(ref.cpu, info[ref.name]["procs"]),
                cgroup=info[h.name]["cgroup"],
            )
        )
    return Verification(links, cpus, baseline)
