"""The network a testbed spec becomes: pure planning, no I/O.

One *fabric* namespace holds the switches: a ``core`` bridge, and per site a bridge ``s<i>``
joined to ``core`` by a veth pair ``u<i>``/``w<i>`` (the site's WAN uplink, tbf-limited both
ways). Each host is its own namespace whose ``eth0`` is a veth to port ``h<j>`` of its site's
bridge, limited both ways to its link rate (its access rate, capped by the site's LAN rate).
The launcher's machine reaches the testbed through one veth from the root namespace to
``core`` (``gw``), the only device outside the testbed's namespaces. All addresses are in one
private /24: hosts from ``.1``, the gateway ``.254``.

Traffic inside a site crosses two host links; traffic between sites also crosses both sites'
uplinks, so the bottleneck of a path is the slowest of those.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass

from edgetrain.cgroups import CFS_PERIOD_US
from edgetrain.emulate.spec import TestbedSpec
from edgetrain.runtime.setting_build import HostFacts, TestbedFacts

NS_PREFIX = "etb-"
GATEWAY_HOST = 254
TBF_LATENCY_S = 0.05  # a WAN uplink's ports (a router's queue): 50 ms at the rate
TBF_LATENCY = f"{round(TBF_LATENCY_S * 1000)}ms"
MIN_BURST_BYTES = 32 * 1024
BURST_SECONDS = 0.002
# A device's own interface queues what its sockets hand it, as Linux's default txqueuelen of
# 1,000 full frames does: on a real device a slow link pushes back on the sender (TCP Small
# Queues, byte queue limits) and drops nothing locally. Cut to 50 ms, the device's own tbf
# dropped its TCP segments before the wire (1,788 of 13,102 segments, 9% retransmitted, on
# mercury-4u at 10 Mbit/s while four devices all-reduced 370 KB each an iteration), and the
# aggregation took twice its bytes' time at the rate. The far end of a host's link (its port on
# the site's switch) queues as much: at these rates an access link is Wi-Fi, cellular or a shaped
# line, whose downstream queue (the access point's, the modem's) is deep, not a LAN switch's
# 50 ms. With 50 ms (41 frames at 10 Mbit/s) three peers sending to one device at once (the
# all-reduce's incast) overflowed it: 400 drops in 300 iterations of that run, the aggregation
# 0.41 s an iteration against 0.33 s with the device's queue at both ends (0.31 s of bytes).
HOST_QUEUE_FRAMES = 1000
FRAME_BYTES = 1514


@dataclass(frozen=True)
class HostNode:
    """One emulated host: its namespace, address, link rate and limits."""

    name: str
    site: str
    ns: str
    port: str
    address: str
    link_bps: int
    cpu: float
    memory: int | None
    workers: int
    labels: tuple[str, ...]
    cpu_period_us: int = CFS_PERIOD_US  # its CPU quota's period (cpu.cfs_period_us)


@dataclass(frozen=True)
class SiteNode:
    """A site's bridge and its uplink to the core bridge."""

    name: str
    bridge: str
    uplink: str
    wan_port: str
    lan_bps: int
    wan_bps: int | None


@dataclass(frozen=True)
class LinkCheck:
    """One link class to verify: traffic from ``src`` to ``dst`` should reach ``expected_bps``."""

    kind: str
    label: str
    src: str
    dst: str
    expected_bps: int


@dataclass(frozen=True)
class Topology:
    """Everything ``emulate up`` builds, by name."""

    name: str
    subnet: str
    fabric_ns: str
    gateway_dev: str
    gateway_address: str
    sites: tuple[SiteNode, ...]
    hosts: tuple[HostNode, ...]

    @property
    def namespaces(self) -> list[str]:
        return [self.fabric_ns, *(h.ns for h in self.hosts)]

    def host(self, name: str) -> HostNode:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def site(self, name: str) -> SiteNode:
        for s in self.sites:
            if s.name == name:
                return s
        raise KeyError(name)

    def path_bps(self, a: str, b: str) -> int:
        """The bottleneck rate between hosts ``a`` and ``b``."""
        return self.facts().path_bps(a, b)

    def facts(self) -> TestbedFacts:
        """What a cost model needs of this testbed (the ``testbed`` table of its hosts file)."""
        hosts = tuple(
            HostFacts(h.name, h.cpu, h.link_bps, h.workers, h.memory, h.site, h.cpu_period_us / 1e6)
            for h in self.hosts
        )
        return TestbedFacts(self.name, hosts, {s.name: s.wan_bps for s in self.sites})

    def commands(self) -> list[list[str]]:
        """The ``ip``/``tc`` commands that build the network, in order."""
        fab = self.fabric_ns
        cmds: list[list[str]] = [
            ["ip", "netns", "add", fab],
            ["ip", "-n", fab, "link", "set", "lo", "up"],
            ["ip", "-n", fab, "link", "add", "core", "type", "bridge"],
            ["ip", "-n", fab, "link", "set", "core", "up"],
        ]
        for s in self.sites:
            cmds += [
                ["ip", "-n", fab, "link", "add", s.bridge, "type", "bridge"],
                ["ip", "-n", fab, "link", "set", s.bridge, "up"],
                ["ip", "-n", fab, "link", "add", s.uplink, "type", "veth", "peer", "name",
                 s.wan_port],
                ["ip", "-n", fab, "link", "set", s.uplink, "master", s.bridge],
                ["ip", "-n", fab, "link", "set", s.wan_port, "master", "core"],
                ["ip", "-n", fab, "link", "set", s.uplink, "up"],
                ["ip", "-n", fab, "link", "set", s.wan_port, "up"],
            ]  # fmt: skip
            if s.wan_bps is not None:
                cmds += [tbf(fab, s.uplink, s.wan_bps), tbf(fab, s.wan_port, s.wan_bps)]
        for h in self.hosts:
            bridge = self.site(h.site).bridge
            cmds += [
                ["ip", "netns", "add", h.ns],
                ["ip", "-n", h.ns, "link", "set", "lo", "up"],
                ["ip", "-n", fab, "link", "add", h.port, "type", "veth", "peer", "name", "eth0",
                 "netns", h.ns],
                ["ip", "-n", fab, "link", "set", h.port, "master", bridge],
                ["ip", "-n", fab, "link", "set", h.port, "up"],
                ["ip", "-n", h.ns, "addr", "add", f"{h.address}/24", "dev", "eth0"],
                ["ip", "-n", h.ns, "link", "set", "eth0", "up"],
                host_tbf(h.ns, h.link_bps),
                host_tbf(fab, h.link_bps, h.port),
            ]  # fmt: skip
        cmds += [
            ["ip", "link", "add", self.gateway_dev, "type", "veth", "peer", "name", "gw",
             "netns", fab],
            ["ip", "-n", fab, "link", "set", "gw", "master", "core"],
            ["ip", "-n", fab, "link", "set", "gw", "up"],
            ["ip", "addr", "add", f"{self.gateway_address}/24", "dev", self.gateway_dev],
            ["ip", "link", "set", self.gateway_dev, "up"],
        ]  # fmt: skip
        return cmds

    def gateway_bps(self, host: str) -> int:
        """The bottleneck rate between ``host`` and the gateway (the launcher's machine)."""
        h = self.host(host)
        wan = self.site(h.site).wan_bps
        return min(h.link_bps, wan) if wan else h.link_bps

    def link_checks(self) -> list[LinkCheck]:
        """One measurement per link class that some path makes the bottleneck: each site's
        LAN, each access-limited host's link, each site's WAN uplink. Each class is measured
        towards the endpoint (a host, or the gateway) with the fastest path; a class that no
        path isolates (a slower link is always on the way) is left out."""
        checks: list[LinkCheck] = []
        for s in self.sites:
            hosts = [h for h in self.hosts if h.site == s.name]
            full = sorted((h for h in hosts if h.link_bps >= s.lan_bps), key=lambda h: h.name)
            if len(full) >= 2:
                a, b = full[0], full[1]
                checks.append(LinkCheck("lan", s.name, a.name, b.name, s.lan_bps))
            for h in hosts:
                if h.link_bps < s.lan_bps:
                    check = self._best("access", h.name, h, [p for p in self.hosts if p is not h])
                    if check.expected_bps == h.link_bps:
                        checks.append(check)
            if s.wan_bps is not None:
                fastest = max(hosts, key=lambda h: (h.link_bps, h.name))
                others = [p for p in self.hosts if p.site != s.name]
                check = self._best("wan", f"{s.name} uplink", fastest, others, prefer_hosts=True)
                if check.expected_bps == s.wan_bps:
                    checks.append(check)
        return checks

    def _best(
        self, kind: str, label: str, h: HostNode, peers: list[HostNode], prefer_hosts: bool = False
    ) -> LinkCheck:
        """From ``h`` towards the peer (or the gateway) with the fastest path."""
        options = [(self.gateway_bps(h.name), 0 if prefer_hosts else 1, GATEWAY)]
        options += [(self.path_bps(h.name, p.name), 1 if prefer_hosts else 0, p.name)
                    for p in peers]  # fmt: skip
        rate, _, dst = max(options)
        return LinkCheck(kind, label, h.name, dst, rate)


GATEWAY = "gateway"


def burst_bytes(bps: int) -> int:
    """A tbf bucket: 2 ms at the rate, at least 32 KiB (enough for GSO packets at low rates)."""
    return max(MIN_BURST_BYTES, int(bps / 8 * BURST_SECONDS))


def tbf(ns: str, dev: str, bps: int) -> list[str]:
    """A WAN uplink port's limit (either end): the rate, the bucket and 50 ms of queue."""
    return ["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{bps}bit",
            "burst", str(burst_bytes(bps)), "latency", TBF_LATENCY]  # fmt: skip


def host_queue_bytes(bps: int) -> int:
    """A device's own queue in bytes: 1,000 full frames (Linux's default txqueuelen), and never
    less than a WAN port's (50 ms at the rate beside the bucket)."""
    port = int(bps / 8 * TBF_LATENCY_S) + burst_bytes(bps)
    return max(HOST_QUEUE_FRAMES * FRAME_BYTES, port)


def host_tbf(ns: str, bps: int, dev: str = "eth0") -> list[str]:
    """Either end of a host's link (``eth0`` in its namespace, or its port ``dev`` on the
    site's switch): the rate, the bucket and the device's queue (:func:`host_queue_bytes`)."""
    return ["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
            f"{bps}bit", "burst", str(burst_bytes(bps)), "limit",
            str(host_queue_bytes(bps))]  # fmt: skip


def gateway_dev(name: str) -> str:
    """The root-namespace veth of testbed ``name`` (at most 15 characters, as Linux needs)."""
    return "etb" + hashlib.sha1(name.encode()).hexdigest()[:8] + "gw"


def fabric_ns(name: str) -> str:
    return f"{NS_PREFIX}{name}"


def host_ns(name: str, host: str) -> str:
    """``etb-NAME.HOST``: '.' is in no testbed name, so the name ends at the first '.'."""
    return f"{NS_PREFIX}{name}.{host}"


def owned_namespace(name: str, ns: str) -> bool:
    """Whether namespace ``ns`` belongs to testbed ``name`` (and to no other testbed)."""
    return ns == fabric_ns(name) or ns.startswith(f"{NS_PREFIX}{name}.")


def build(spec: TestbedSpec, subnet: str) -> Topology:
    """Name and address every part of ``spec`` inside ``subnet`` (a /24)."""
    net = ipaddress.ip_network(subnet)
    addresses = list(net.hosts())
    sites = tuple(
        SiteNode(s.name, f"s{i}", f"u{i}", f"w{i}", s.lan, spec.wan_of(s))
        for i, s in enumerate(spec.sites)
    )
    hosts = tuple(
        HostNode(
            name=h.name,
            site=s.name,
            ns=host_ns(spec.name, h.name),
            port=f"h{j}",
            address=str(addresses[j]),
            link_bps=min(h.access, s.lan) if h.access is not None else s.lan,
            cpu=h.cpu,
            memory=h.memory,
            workers=h.workers,
            labels=tuple(h.labels),
            cpu_period_us=spec.period_of(h) * 1000,
        )
        for j, (s, h) in enumerate(spec.hosts)
    )
    return Topology(
        name=spec.name,
        subnet=str(net),
        fabric_ns=fabric_ns(spec.name),
        gateway_dev=gateway_dev(spec.name),
        gateway_address=str(addresses[GATEWAY_HOST - 1]),
        sites=sites,
        hosts=hosts,
    )


def spec_facts(spec: TestbedSpec) -> TestbedFacts:
    """What a cost model needs of ``spec``, without bringing it up (the facts do not depend on
    the addresses)."""
    return build(spec, spec.subnet or "10.0.0.0/24").facts()
