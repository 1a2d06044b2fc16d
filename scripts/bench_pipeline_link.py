"""scripts/bench_pipeline's shaped link: two emulated hosts joined at one tbf rate.

The ``--link RATE`` arms of ``scripts/bench_pipeline`` run across a 2-host testbed that
edgetrain's own emulator builds (``edgetrain emulate up``'s code: one namespace per host, each
host's ``eth0`` a veth to a bridge, ``tc tbf`` at RATE on both ends of it, so both directions
are shaped; one cgroup per host with its CPU share; one sshd per host). edgetrain's
``dataparallel`` is launched on it over ssh as a user launches on a testbed; DDP's two ranks are
started straight into the same hosts (the host's network namespace and cgroup, as its sshd
starts a worker), with the rendezvous on host 1's address. The testbed is named after this
process, its state is kept in the benchmark's temporary directory, and everything (processes,
namespaces, cgroups) is removed on the way out, on error and on Ctrl-C too.

The planning (the spec, the hosts file the edgetrain arm launches with, a rank's argv) is pure;
:func:`emulated_link` does the I/O.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgetrain.emulate import cgroups
from edgetrain.emulate.spec import TestbedSpec, format_rate, parse_rate
from edgetrain.emulate.sshd import NETNS_DIR
from edgetrain.emulate.topology import Topology, build, burst_bytes
from edgetrain.launch.hosts import HostsFile, parse_hosts, to_toml

HOSTS = ("r0", "r1")  # one per replica / rank
HOST_CPU = 1.0  # cores per host: a single-threaded process is never throttled below a core
PLAN_SUBNET = "10.232.0.0/24"  # only for planning without a testbed; `up` picks a free one
IFNAME = "eth0"  # each emulated host's only interface (GLOO_SOCKET_IFNAME)


def rate_bps(text: str) -> int:
    """A tc rate (``100mbit``) in bit/s; ValueError naming the text if it is none."""
    return parse_rate(text.strip())


def testbed_name(pid: int) -> str:
    """A testbed name of this process (distinct from other benchmarks' and testbeds')."""
    return f"benchlink{pid % 10**8}"


def link_spec(name: str, bps: int, cpu: float = HOST_CPU) -> TestbedSpec:
    """Two hosts on one site whose LAN is ``bps``: each host's link is tbf-limited to it both
    ways, so every path between them has that bottleneck in each direction."""
    return TestbedSpec.model_validate(
        {
            "name": name,
            "description": f"scripts/bench_pipeline --link: 2 hosts at {format_rate(bps)}",
            "sites": [
                {
                    "name": "link",
                    "lan": bps,
                    "hosts": [{"name": h, "cpu": cpu, "workers": 1} for h in HOSTS],
                }
            ],
        }
    )


def plan_topology(name: str, bps: int) -> Topology:
    """The testbed's plan (names, addresses, rates) before anything is built."""
    return build(link_spec(name, bps), PLAN_SUBNET)


def link_facts(bps: int) -> dict[str, Any]:
    """What the JSON records of the link."""
    return {
        "rate": format_rate(bps),
        "rate_bps": bps,
        "hosts": len(HOSTS),
        "host_cpu": HOST_CPU,
        "shaping": "tc tbf on both ends of each host's veth (both directions), burst "
        f"{burst_bytes(bps)} B, latency 50ms; built by edgetrain's emulator",
    }


def hosts_for_workdir(hosts: HostsFile, workdir: Path) -> str:
    """The testbed's hosts file with every host's ``workdir`` set to ``workdir`` (the remote
    ``python -m edgetrain`` imports the checkout it starts in: the ``--tree`` under test)."""
    moved = [h.model_copy(update={"workdir": str(workdir)}) for h in hosts.hosts]
    text = to_toml(hosts.model_copy(update={"hosts": moved}))
    parse_hosts(_loads(text), "hosts.toml")  # what launch will read back
    return text


def _loads(text: str) -> dict[str, Any]:
    from edgetrain.tomlconfig import loads

    return loads(text)


def host_command(testbed: str, ns: str, host: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` on emulated host ``host`` without ssh: in its cgroup (its CPU
    share) and its network namespace. ``nsenter --net`` only, as the host's sshd is started:
    ``ip netns exec`` would also remount /sys."""
    group = cgroups.cpu_dir(testbed, host) / "cgroup.procs"
    inner = ["nsenter", f"--net={NETNS_DIR / ns}", *argv]
    script = f"echo $$ > {shlex.quote(str(group))} && exec {shlex.join(inner)}"
    return ["sh", "-c", script]


@dataclass(frozen=True)
class Link:
    """A testbed that is up: its name, plan, and the hosts file the edgetrain arm uses."""

    name: str
    topo: Topology
    hosts_file: Path
    bps: int

    @property
    def master(self) -> str:
        """Rank 0's host address: where DDP's rendezvous listens."""
        return self.topo.hosts[0].address

    def rank_command(self, rank: int, argv: Sequence[str]) -> list[str]:
        h = self.topo.hosts[rank]
        return host_command(self.name, h.ns, h.name, argv)


def requirements_unavailable() -> str | None:
    """Why the link cannot be built here (root, iproute2, bridge, tbf, cgroups, sshd), or None."""
    from edgetrain.emulate.testbed import requirements_unavailable as why

    return why(link_spec(testbed_name(os.getpid()), 100_000_000))


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def emulated_link(
    bps: int, state_root: Path, workdir: Path, python: str, progress: Callable[[str], None]
) -> Iterator[Link]:
    """Bring the 2-host testbed up, yield it, and take it down whatever happens (SIGTERM is
    turned into KeyboardInterrupt meanwhile, so a kill also reaches the clean-up)."""
    from edgetrain.emulate import testbed
    from edgetrain.launch.hosts import load_hosts

    name = testbed_name(os.getpid())
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        progress(f"link: building 2 emulated hosts at {format_rate(bps)} (testbed {name})")
        tb = testbed.up(link_spec(name, bps), root=state_root, python=python)
        try:
            hosts, _ = load_hosts(tb.hosts_file)
            path = state_root / f"{name}-hosts.toml"
            path.write_text(hosts_for_workdir(hosts, workdir))
            yield Link(name, tb.topo, path, bps)
        finally:
            progress(f"link: removing testbed {name}")
            report = testbed.down(name, state_root)
            for problem in report.problems:
                progress(f"link: clean-up problem: {problem}")
    finally:
        signal.signal(signal.SIGTERM, previous)
