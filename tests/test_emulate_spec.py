"""Testbed specs and the topology they plan (pure: no root, nothing built)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetrain.emulate.spec import SpecError, load_spec, parse_rate, parse_size, parse_spec
from edgetrain.emulate.topology import (
    GATEWAY,
    build,
    gateway_dev,
    host_queue_bytes,
    host_tbf,
    owned_namespace,
)
from tests.helpers.paths import TESTBEDS

PAPERS = (
    "edgegossip-4",
    "dlion-4",
    "dlion-compute-4",
    "dlion-network-4",
    "mercury-4",
    "mercury-4u",
    "dynacomm",
    "dynacomm-repro",
    "dynacomm-repro-1",
    "mcpipe-3",
    "mcpipe-2",
)


def _spec(**top: object) -> dict[str, object]:
    base: dict[str, object] = {
        "name": "t",
        "sites": [{"name": "a", "lan": "1gbit", "hosts": [{"name": "h1", "cpu": 0.5}]}],
    }
    return {**base, **top}


@pytest.mark.parametrize("name", PAPERS)
def test_each_paper_has_a_valid_testbed(name: str) -> None:
    spec = load_spec(TESTBEDS / f"{name}.toml")
    assert spec.name == name
    assert spec.description
    # every spec fits this project's 2-core machines when all hosts run at once
    assert sum(h.cpu for _, h in spec.hosts) <= 1.9 + 1e-9
    assert build(spec, "10.232.9.0/24").link_checks()


def test_dlion_is_two_micro_clouds_of_3_and_1_with_one_fast_host() -> None:
    spec = load_spec(TESTBEDS / "dlion-4.toml")
    assert [len(s.hosts) for s in spec.sites] == [3, 1]
    assert all(s.lan == 1_000_000_000 for s in spec.sites)
    assert all(spec.wan_of(s) == 100_000_000 for s in spec.sites)
    cpus = sorted(h.cpu for _, h in spec.hosts)
    assert cpus[-1] == pytest.approx(3 * cpus[0]) and cpus[0] == cpus[2]


def test_dlions_two_experiments_separate_compute_and_network_heterogeneity() -> None:
    compute = load_spec(TESTBEDS / "dlion-compute-4.toml")
    assert len(compute.sites) == 1 and compute.sites[0].lan == 1_000_000_000
    assert sorted(h.cpu for _, h in compute.hosts) == [0.3, 0.3, 0.3, 0.9]  # 3:1, one fast
    assert compute.wan_of(compute.sites[0]) is None  # one LAN: no WAN
    network = load_spec(TESTBEDS / "dlion-network-4.toml")
    assert [len(s.hosts) for s in network.sites] == [3, 1]
    assert all(s.lan == 1_000_000_000 for s in network.sites)
    assert all(network.wan_of(s) == 100_000_000 for s in network.sites)
    assert {h.cpu for _, h in network.hosts} == {0.45}  # equal compute
    topo = build(network, "10.232.9.0/24")
    assert {h.site for h in topo.hosts} == {"cloud-a", "cloud-b"}  # the hosts file's sites


def test_mercury_links_span_10_to_200_mbit_and_edgegossip_speeds_differ() -> None:
    mercury = load_spec(TESTBEDS / "mercury-4.toml")
    assert sorted(h.access or 0 for _, h in mercury.hosts) == [10e6, 50e6, 100e6, 200e6]
    gossip = load_spec(TESTBEDS / "edgegossip-4.toml")
    assert len({h.cpu for _, h in gossip.hosts}) == 4
    dyna = load_spec(TESTBEDS / "dynacomm.toml")
    assert any("ps" in h.labels for _, h in dyna.hosts) and len(dyna.sites) == 2
    assert len(load_spec(TESTBEDS / "mcpipe-3.toml").sites[0].hosts) == 3


@pytest.mark.parametrize(
    ("text", "bps"),
    [("100mbit", 100e6), ("1gbit", 1e9), ("1.5Gbit", 1.5e9), ("500kbit", 5e5), ("12.5mbps", 0),
     ("10MBit", 10e6), (2_000_000, 2e6), ("125000bps", 1e6)],
)  # fmt: skip
def test_parse_rate(text: str | int, bps: float) -> None:
    if bps == 0:
        with pytest.raises(ValueError):
            parse_rate(text)
    else:
        assert parse_rate(text) == int(bps)


@pytest.mark.parametrize("bad", ["fast", "10 mb", "-5mbit", "1tbit", "50kbit", True])
def test_parse_rate_rejects(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_rate(bad)  # type: ignore[arg-type]


def test_parse_size() -> None:
    assert parse_size("512m") == 512 * 2**20
    assert parse_size("2g") == parse_size("2GiB") == parse_size("2GB") == 2 * 2**30
    assert parse_size(64 * 2**20) == 64 * 2**20
    for bad in ("1k", "lots", "16m"):
        with pytest.raises(ValueError):
            parse_size(bad)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_spec(extra=1), "unknown key 'extra'"),
        (_spec(sites=[{"name": "a", "lann": "1gbit", "hosts": [{"name": "h", "cpu": 1}]}]),
         "unknown key 'lann' in [[sites]] #1; did you mean 'lan'?"),
        (_spec(sites=[]), "sites"),
        (_spec(name="Bad_Name"), "lower-case"),
        (_spec(sites=[{"name": "a", "hosts": [{"name": "h", "cpu": 1}]}]),
         "[[sites]] #1 lan: missing"),
        (_spec(sites=[{"name": "a", "lan": "fast", "hosts": [{"name": "h", "cpu": 1}]}]),
         "not a rate"),
        (_spec(sites=[{"name": "a", "lan": "1gbit", "hosts": [{"name": "h", "cpu": 0}]}]),
         "cpu"),
        (_spec(sites=[{"name": "a", "lan": "1gbit",
                       "hosts": [{"name": "h", "cpu": 1}, {"name": "h", "cpu": 1}]}]),
         "host name 'h' is used twice"),
        (_spec(sites=[{"name": "a", "lan": "1gbit", "hosts": [{"name": "h", "cpu": 1}]},
                      {"name": "b", "lan": "1gbit", "hosts": [{"name": "g", "cpu": 1}]}]),
         "no WAN rate"),
        (_spec(subnet="8.8.8.0/24"), "private IPv4 /24"),
        (_spec(subnet="10.0.0.0/16"), "private IPv4 /24"),
    ],
)  # fmt: skip
def test_bad_specs_name_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec(data, "bed.toml")
    assert message in str(exc.value)
    assert str(exc.value).startswith("bed.toml: ")
    assert "\n" not in str(exc.value)


def test_load_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "none.toml")
    (tmp_path / "bad.toml").write_text("name = [")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(tmp_path / "bad.toml")
    (tmp_path / "lab-2.toml").write_text(
        '[[sites]]\nname = "a"\nlan = "1gbit"\n[[sites.hosts]]\nname = "h"\ncpu = 0.5\n'
    )
    assert load_spec(tmp_path / "lab-2.toml").name == "lab-2"  # the file's stem by default


def test_with_name() -> None:
    spec = parse_spec(_spec(), "x")
    assert spec.with_name("other").name == "other"
    with pytest.raises(SpecError, match="--name"):
        spec.with_name("no spaces")


def _two_sites() -> dict[str, object]:
    return _spec(
        wan="100mbit",
        sites=[
            {"name": "a", "lan": "200mbit",
             "hosts": [{"name": "h1", "cpu": 0.5, "workers": 2}, {"name": "h2", "cpu": 0.25}]},
            {"name": "b", "lan": "1gbit",
             "hosts": [{"name": "h3", "cpu": 0.25, "access": "30mbit"}]},
        ],
    )  # fmt: skip


def test_topology_addresses_rates_and_paths() -> None:
    topo = build(parse_spec(_two_sites(), "x"), "10.232.40.0/24")
    assert [h.address for h in topo.hosts] == ["10.232.40.1", "10.232.40.2", "10.232.40.3"]
    assert topo.gateway_address == "10.232.40.254"
    assert [h.link_bps for h in topo.hosts] == [200e6, 200e6, 30e6]
    assert topo.path_bps("h1", "h2") == 200e6
    assert topo.path_bps("h1", "h3") == 30e6
    assert topo.gateway_bps("h1") == 100e6
    assert len(gateway_dev("a-very-long-testbed-name")) <= 15
    assert topo.namespaces == ["etb-t", "etb-t.h1", "etb-t.h2", "etb-t.h3"]


def test_commands_limit_every_link_both_ways() -> None:
    topo = build(parse_spec(_two_sites(), "x"), "10.232.40.0/24")
    tbfs = [c for c in topo.commands() if c[0] == "tc"]
    rates = sorted((c[2], c[6], c[c.index("rate") + 1]) for c in tbfs)
    assert rates == sorted([
        ("etb-t", "u0", "100000000bit"), ("etb-t", "w0", "100000000bit"),
        ("etb-t", "u1", "100000000bit"), ("etb-t", "w1", "100000000bit"),
        ("etb-t.h1", "eth0", "200000000bit"), ("etb-t", "h0", "200000000bit"),
        ("etb-t.h2", "eth0", "200000000bit"), ("etb-t", "h1", "200000000bit"),
        ("etb-t.h3", "eth0", "30000000bit"), ("etb-t", "h2", "30000000bit"),
    ])  # fmt: skip
    # the only device in the root namespace is the gateway veth, with the .254 address
    root = [c for c in topo.commands() if c[:2] == ["ip", "link"] or c[:2] == ["ip", "addr"]]
    assert all(topo.gateway_dev in c or "netns" in c for c in root)


def test_both_ends_of_a_host_link_queue_as_a_device_and_a_wan_port_50_ms() -> None:
    topo = build(parse_spec(_two_sites(), "x"), "10.232.40.0/24")
    tbfs = {(c[2], c[6]): c[7:] for c in topo.commands() if c[0] == "tc"}
    # 30 Mbit/s: 1,000 full frames on the device and on its port of the site's switch
    # (1,514,000 bytes, about 0.4 s); a 32 KiB bucket both ways
    common = ["root", "tbf", "rate", "30000000bit", "burst", "32768"]
    assert tbfs[("etb-t.h3", "eth0")] == [*common, "limit", "1514000"]
    assert tbfs[("etb-t", "h2")] == [*common, "limit", "1514000"]
    assert tbfs[("etb-t", "u0")][-2:] == ["latency", "50ms"]  # a WAN port is the fabric's
    assert tbfs[("etb-t", "w0")][-2:] == ["latency", "50ms"]
    # above about 240 Mbit/s the device's queue is the port's: 50 ms at the rate and the bucket
    assert host_queue_bytes(10_000_000) == 1_514_000
    assert host_queue_bytes(1_000_000_000) == 6_250_000 + 250_000
    assert host_tbf("n", 10**9)[-2:] == ["limit", "6500000"]


def test_link_checks_isolate_each_class() -> None:
    topo = build(parse_spec(_two_sites(), "x"), "10.232.40.0/24")
    checks = {(c.kind, c.label): c for c in topo.link_checks()}
    assert checks["lan", "a"].expected_bps == 200e6
    assert checks["access", "h3"].expected_bps == 30e6
    assert checks["wan", "a uplink"].dst == GATEWAY  # h3's access link would hide the WAN
    assert checks["wan", "a uplink"].expected_bps == 100e6
    assert ("wan", "b uplink") not in checks  # behind h3's 30 Mbit/s: nothing isolates it


def test_namespace_ownership_is_unambiguous() -> None:
    assert owned_namespace("a", "etb-a")
    assert owned_namespace("a", "etb-a.h1")
    assert not owned_namespace("a", "etb-a-b")
    assert not owned_namespace("a", "etb-a-b.h1")
    assert not owned_namespace("a", "et-a")


def test_a_busy_machine_is_named_in_one_line() -> None:
    from edgetrain.emulate.verify import busy_line

    assert busy_line(1.2, 2, [(0.3, 41, "sshd"), (0.1, 7, "cron")]) is None  # idle enough
    line = busy_line(4.0, 2, [(1.0, 1234, "python"), (0.6, 99, "make"), (0.02, 5, "top")])
    assert line == (
        "the machine is too busy to grant the hosts' shares: load average 4.0 on 2 cores, "
        "1.6 cores used outside the testbed (most: python (pid 1234, 100%), make (pid 99, "
        "60%)); measure again on an idle machine"
    )
    assert busy_line(1.0, 2, [(0.7, 3, "yes")]) is not None  # outside use alone counts


# ---------------------------------------------------------------------- the CPU quota's period


def _hosts(*hosts: dict[str, object], **top: object) -> dict[str, object]:
    return _spec(sites=[{"name": "a", "lan": "1gbit", "hosts": list(hosts)}], **top)


def test_the_cpu_period_defaults_to_the_kernels_and_a_host_may_set_its_own() -> None:
    spec = parse_spec(_hosts({"name": "h1", "cpu": 0.3}), "bed.toml")
    assert spec.cpu_period_ms == 100
    topo = build(spec, "10.231.0.0/24")
    assert topo.host("h1").cpu_period_us == 100_000
    assert topo.facts().host("h1").quota_period_s == pytest.approx(0.1)
    spec = parse_spec(
        _hosts({"name": "h1", "cpu": 0.3}, {"name": "h2", "cpu": 0.9, "cpu_period_ms": 50},
               cpu_period_ms=10),
        "bed.toml",
    )  # fmt: skip
    topo = build(spec, "10.231.0.0/24")
    assert [h.cpu_period_us for h in topo.hosts] == [10_000, 50_000]
    assert [h.quota_period_s for h in topo.facts().hosts] == pytest.approx([0.01, 0.05])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_hosts({"name": "h", "cpu": 0.5}, cpu_period_ms=0),
         "cpu_period_ms: Input should be greater than or equal to 1 (got 0)"),
        (_hosts({"name": "h", "cpu": 0.5}, cpu_period_ms=1001),
         "cpu_period_ms: Input should be less than or equal to 1000"),
        (_hosts({"name": "h", "cpu": 0.5}, cpu_period_ms=10.5), "cpu_period_ms"),
        (_hosts({"name": "h", "cpu": 0.5}, cpu_period_ms="10"), "cpu_period_ms"),
        (_hosts({"name": "h", "cpu": 0.5}, cpu_period_ms=True), "cpu_period_ms"),
        (_hosts({"name": "h", "cpu": 0.5, "cpu_period_ms": -5}), "hosts #1 cpu_period_ms"),
        (_hosts({"name": "h", "cpu": 0.05}, cpu_period_ms=10),
         "host 'h': cpu 0.05 x cpu_period_ms 10 is a quota under the kernel's least (1 ms); "
         "raise cpu_period_ms to at least 20"),
    ],
)  # fmt: skip
def test_bad_cpu_periods_are_one_line(data: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec(data, "bed.toml")
    assert message in str(exc.value)
    assert str(exc.value).startswith("bed.toml: ") and "\n" not in str(exc.value)


def test_the_quota_is_written_at_the_hosts_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgetrain import cgroups as primitives
    from edgetrain.emulate import cgroups

    # what the kernel's files get, in order: the period before the quota of it
    assert list(primitives.quota_files(0.3).items()) == [
        ("cpu.cfs_period_us", "100000"),
        ("cpu.cfs_quota_us", "30000"),
        ("cpu.shares", "307"),
    ]
    assert primitives.quota_files(0.3, 10_000)["cpu.cfs_quota_us"] == "3000"
    assert primitives.quota_files(0.05, 10_000)["cpu.cfs_quota_us"] == "1000"  # the least
    monkeypatch.setattr(cgroups, "CGROUP_ROOT", tmp_path)
    spec = parse_spec(_hosts({"name": "h1", "cpu": 0.3}, cpu_period_ms=10), "bed.toml")
    host = build(spec, "10.231.0.0/24").host("h1")
    cgroups.create("bed", host.name, host.cpu, host.memory, host.cpu_period_us)
    group = tmp_path / "cpu" / cgroups.TOP / "bed" / "h1"
    assert (group / "cpu.cfs_period_us").read_text() == "10000"
    assert (group / "cpu.cfs_quota_us").read_text() == "3000"
    assert cgroups.read_cpu("bed", "h1") == pytest.approx(0.3)
    cgroups.set_cpu("bed", "h1", 0.5, host.cpu_period_us)  # a trace's change keeps the period
    assert (group / "cpu.cfs_quota_us").read_text() == "5000"
    assert (group / "cpu.cfs_period_us").read_text() == "10000"
