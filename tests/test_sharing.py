"""Links that concurrent transfers share (:mod:`edgetrain.runtime.sharing`), against literal
tables: a host's own link split among its transfers, each direction apart; a WAN uplink split
among the transfers leaving (or entering) its site; nothing within a host; the smallest share
along a transfer's path; and the setting's rates, never above a pair's own link."""

from __future__ import annotations

import math

import pytest

from edgetrain.runtime.predict import Device, Link, Setting
from edgetrain.runtime.sharing import Topology

# hosts 0, 1 on site 0 (10 and 100 units a second), host 2 on site 1 (1000); site 0's WAN 30,
# site 1 has none (its uplink not a bottleneck). Workers 0-3 on hosts 0, 0, 1, 2.
TOPO = Topology(
    worker_host=(0, 0, 1, 2),
    host_Bps=(10.0, 100.0, 1000.0),
    host_site=(0, 0, 1),
    site_wan_Bps=(30.0, None),
)


def test_a_transfer_alone_gets_its_paths_narrowest_link() -> None:
    assert TOPO.rates([(2, 3)]) == [30.0]  # host 1 (100) -> WAN 30 -> host 2 (1000)
    assert TOPO.rates([(0, 2)]) == [10.0]  # host 0's own link
    assert TOPO.rates([(0, 1)]) == [math.inf]  # one host: not on any link


def test_a_servers_link_and_a_wan_split_evenly() -> None:
    # worker 3 (host 2) serves the three others: its sending link (1000) carries three, the
    # WAN into site 0 (30) three as well, host 0's receiving link (10) two
    assert TOPO.rates([(3, 0), (3, 1), (3, 2)]) == pytest.approx([5.0, 5.0, 10.0])
    # the other direction shares the other directions' links: the same split, apart from them
    both = TOPO.rates([(3, 0), (3, 1), (3, 2), (0, 3), (1, 3), (2, 3)])
    assert both == pytest.approx([5.0, 5.0, 10.0, 5.0, 5.0, 10.0])
    # within site 0 no WAN: host 0's sending link (10) shared by its two workers' transfers
    assert TOPO.rates([(0, 2), (1, 2)]) == pytest.approx([5.0, 5.0])


def test_a_topology_refuses_what_it_cannot_mean() -> None:
    with pytest.raises(ValueError, match="one site per host"):
        Topology((0,), (1.0, 2.0), (0,), (None,))
    with pytest.raises(ValueError, match="worker's host"):
        Topology((2,), (1.0,), (0,), (None,))
    with pytest.raises(ValueError, match="host's site"):
        Topology((0,), (1.0,), (1,), (None,))
    with pytest.raises(ValueError, match="positive"):
        Topology((0,), (0.0,), (0,), (None,))


def test_a_settings_concurrent_rates_never_exceed_a_pairs_link() -> None:
    devices = tuple(Device(str(i)) for i in range(4))
    # a slower named link between workers 2 and 3 (8 units) than the topology's 30
    setting = Setting(devices, (Link(1e9), Link(8.0, 0.0, 2, 3)), (), topology=TOPO)
    assert setting.concurrent_Bps([(3, 0), (3, 1), (3, 2)]) == pytest.approx([5.0, 5.0, 8.0])
    # without a topology each pair has its link to itself
    plain = Setting(devices, (Link(1e9), Link(8.0, 0.0, 2, 3)), ())
    assert plain.concurrent_Bps([(3, 0), (3, 2)]) == pytest.approx([1e9, 8.0])
