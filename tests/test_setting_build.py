"""A cost model's setting from a profile and a testbed spec, against literal tables: layers
scaled to the batch, one device per worker slot with its CPU share over the reference, and the
bottleneck rate of each pair's path (LAN, access, WAN, loopback on one host)."""

from __future__ import annotations

import pytest

from edgetrain.emulate.spec import parse_spec
from edgetrain.emulate.topology import build
from edgetrain.runtime.setting_build import (
    LOOPBACK_BPS,
    layers_from_profile,
    profile_cores,
    setting_from_testbed,
    sustained_scale,
    worker_hosts,
)

PROFILE = {
    "batch_sizes": [32, 64],
    "layers": [
        {"name": "fc1", "param_bytes": 400, "activation_bytes": 3200, "fwd_s": 0.004,
         "bwd_s": 0.008},
        {"name": "fc2", "param_bytes": 40, "activation_bytes": 320, "fwd_s": 0.001, "bwd_s": 0.002},
    ],
}  # fmt: skip
SPEC = parse_spec(
    {
        "name": "two-sites",
        "wan": "10mbit",
        "sites": [
            {
                "name": "a",
                "lan": "1gbit",
                "hosts": [
                    {"name": "big", "cpu": 1.0, "workers": 2, "memory": "2g"},
                    {"name": "wifi", "cpu": 0.5, "access": "50mbit"},
                ],
            },
            {"name": "b", "lan": "100mbit", "hosts": [{"name": "far", "cpu": 0.25}]},
        ],
    },
    "spec",
)
FACTS = build(SPEC, "10.231.0.0/24").facts()


def test_layers_scale_to_the_batch() -> None:
    layers = layers_from_profile(PROFILE, 16)
    assert [x.name for x in layers] == ["fc1", "fc2"]
    assert layers[0].forward_s == pytest.approx(0.002)
    assert layers[0].backward_s == pytest.approx(0.004)
    assert (layers[0].param_bytes, layers[0].activation_bytes) == (400, 1600)
    with pytest.raises(ValueError, match="no layers"):
        layers_from_profile({"layers": []}, 16)


def test_a_familys_own_kernels_scale_the_layers() -> None:
    # the layers add up to 15 ms at batch 32; the pipeline's kernels took 7.5 ms there
    timed = {**PROFILE, "kernels": {"pipeline": {"batch": 32, "step_s": 0.0075}}}
    assert sustained_scale(timed, "pipeline") == pytest.approx(0.5)
    assert sustained_scale(timed, "gossip") == 1.0 and sustained_scale(timed, None) == 1.0
    assert sustained_scale(PROFILE, "pipeline") == 1.0
    other_batch = {**PROFILE, "kernels": {"pipeline": {"batch": 64, "step_s": 0.0075}}}
    assert sustained_scale(other_batch, "pipeline") == 1.0
    layers = layers_from_profile(timed, 16, sustained_scale(timed, "pipeline"))
    assert (layers[0].forward_s, layers[0].backward_s) == pytest.approx((0.001, 0.002))
    assert layers[0].activation_bytes == 1600  # bytes do not scale with the times
    assert layers_from_profile(timed, 16)[0].forward_s == pytest.approx(0.002)


def test_under_a_quota_the_sustained_step_at_the_quotas_cores() -> None:
    # 0.6 core: the burst pace 15 ms, the sustained step 25 ms; kernels 7.5 and 12.5 ms
    held = {
        **PROFILE,
        "step_s": 0.015,
        "sustained_step_s": 0.025,
        "cpu_quota": {"cores": 0.6, "period_s": 0.1},
        "kernels": {"pipeline": {"batch": 32, "step_s": 0.0075, "sustained_step_s": 0.0125}},
    }
    assert sustained_scale(held) == pytest.approx(0.025 / 0.015)
    assert sustained_scale(held, "pipeline") == pytest.approx(0.0125 / 0.015)
    assert profile_cores(held, 1.0) == 0.6
    assert profile_cores(PROFILE, 0.45) == 0.45
    assert profile_cores({**PROFILE, "cpu_quota": None}, 0.45) == 0.45
    s = setting_from_testbed(
        FACTS,
        layers_from_profile(held, 32, sustained_scale(held)),
        reference_cpu=profile_cores(held, 1.0),
        workers=4,
    )
    # the 0.5-core host runs the sustained 25 ms step at 0.5 / 0.6 of the profiled host's pace
    wifi = s.devices[2]
    assert wifi.name == "wifi" and wifi.speed == pytest.approx(0.5 / 0.6)
    total = sum(x.forward_s + x.backward_s for x in s.layers)
    assert total / wifi.speed == pytest.approx(0.025 * 0.6 / 0.5)


def test_devices_and_links_from_the_testbed() -> None:
    layers = layers_from_profile(PROFILE, 32)
    s = setting_from_testbed(FACTS, layers, reference_cpu=0.5, latency_s=0.001)
    assert worker_hosts(FACTS) == ["big", "big", "wifi", "far"]
    # big's core shared by its two workers: 0.5 each, as fast as the profiled half core
    assert [d.speed for d in s.devices] == pytest.approx([1.0, 1.0, 1.0, 0.5])
    assert s.devices[0].memory_bytes == 2 * 2**30
    assert s.link(0, 1).bandwidth_Bps == LOOPBACK_BPS and s.link(0, 1).latency_s == 0.0
    assert s.link(0, 2).bandwidth_Bps == pytest.approx(50e6 / 8)  # wifi's access link
    assert s.link(0, 3).bandwidth_Bps == pytest.approx(10e6 / 8)  # the WAN
    assert s.link(2, 3).latency_s == 0.001
    assert len(s.links) == 6
    # which links they share: big's two workers one host, far alone on site b behind the WAN
    topo = s.topology
    assert topo is not None
    assert list(topo.worker_host) == [0, 0, 1, 2]
    assert list(topo.host_Bps) == pytest.approx([1e9 / 8, 50e6 / 8, 100e6 / 8])
    assert list(topo.host_site) == [0, 0, 1]
    assert list(topo.site_wan_Bps) == pytest.approx([10e6 / 8, 10e6 / 8])
    # far serving the three others at once: the 10 Mbit/s WAN (each site's uplink) in three
    assert s.concurrent_Bps([(3, 0), (3, 1), (3, 2)]) == pytest.approx([10e6 / 24] * 3)
    # the facts travel as a TOML table and come back the same
    assert type(FACTS).from_dict(FACTS.as_dict()) == FACTS
    with pytest.raises(ValueError, match="cpu, link_bps"):
        type(FACTS).from_dict({"hosts": [{"name": "x", "cpu": -1, "link_bps": 10}]})


def test_fewer_workers_take_the_first_slots() -> None:
    s = setting_from_testbed(FACTS, layers_from_profile(PROFILE, 32), reference_cpu=1, workers=2)
    assert [d.name for d in s.devices] == ["big", "big"]
    with pytest.raises(ValueError, match="4 worker slots for 5 workers"):
        setting_from_testbed(FACTS, (), reference_cpu=1, workers=5)
    with pytest.raises(ValueError, match="reference_cpu"):
        setting_from_testbed(FACTS, (), reference_cpu=0)


def test_a_fractional_worker_runs_under_its_hosts_quota_period() -> None:
    layers = layers_from_profile(PROFILE, 32)
    s = setting_from_testbed(FACTS, layers, reference_cpu=1.0)
    # every worker has less than a core (big's core is shared by two): the emulator's 100 ms
    assert [d.quota_period_s for d in s.devices] == pytest.approx([0.1] * 4)
    whole = parse_spec(
        {"name": "one", "cpu_period_ms": 10, "sites": [{"name": "a", "lan": "1gbit", "hosts": [
            {"name": "core", "cpu": 1.0}, {"name": "third", "cpu": 0.3}]}]},
        "spec",
    )  # fmt: skip
    facts = build(whole, "10.231.0.0/24").facts()
    s = setting_from_testbed(facts, layers, reference_cpu=1.0)
    assert [d.quota_period_s for d in s.devices] == [None, pytest.approx(0.01)]
    # the period travels in the hosts file's table; a table without it (older) has none
    assert type(facts).from_dict(facts.as_dict()).hosts == facts.hosts
    old = facts.as_dict()
    for h in old["hosts"]:
        del h["quota_period_s"]
    assert {h.quota_period_s for h in type(facts).from_dict(old).hosts} == {None}
    with pytest.raises(ValueError, match="quota_period_s"):
        type(facts).from_dict(
            {"hosts": [{"name": "x", "cpu": 0.5, "link_bps": 10, "quota_period_s": 0}]}
        )
