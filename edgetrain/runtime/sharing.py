"""Links that concurrent transfers share: each host's own link and each site's WAN uplink, as a
testbed (or a hosts file) lays them out. Pure.

A :class:`~edgetrain.runtime.predict.Setting`'s links give each pair of workers its path's
bottleneck, as if that pair were alone on it. When several transfers run at once (a parameter
server's trainers all pulling after the barrier) they share what lies on more than one path: the
server's own link, and a WAN between sites. :meth:`Topology.rates` gives each transfer its
share: every link it crosses split evenly among the transfers that cross it in the same
direction (links are full duplex: a host's sending and receiving, a site's WAN out and in, are
separate), the smallest share along its path. An even split is what TCP flows of equal round
trip settle at on one bottleneck; a transfer held back elsewhere leaves some of its share
unused, which this does not give to the others (so it errs slow where paths differ).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Topology"]


@dataclass(frozen=True)
class Topology:
    """Where each worker runs and what its host's links carry: ``worker_host[i]`` is worker
    ``i``'s host (an index into the host tuples), ``host_Bps`` each host's own link (bytes per
    second, each direction), ``host_site`` its site (an index into ``site_wan_Bps``), and
    ``site_wan_Bps`` each site's WAN uplink (None: one site, no WAN)."""

    worker_host: Sequence[int]
    host_Bps: Sequence[float]
    host_site: Sequence[int]
    site_wan_Bps: Sequence[float | None]

    def __post_init__(self) -> None:
        if len(self.host_Bps) != len(self.host_site):
            raise ValueError("a topology needs one site per host")
        if any(not 0 <= h < len(self.host_Bps) for h in self.worker_host):
            raise ValueError("a worker's host is not one of the topology's hosts")
        if any(not 0 <= s < len(self.site_wan_Bps) for s in self.host_site):
            raise ValueError("a host's site is not one of the topology's sites")
        rates = [*self.host_Bps, *(r for r in self.site_wan_Bps if r is not None)]
        if any(not (math.isfinite(r) and r > 0) for r in rates):
            raise ValueError("a topology's rates must be positive numbers of bytes per second")

    def _links(self, src: int, dst: int) -> list[tuple[str, int]]:
        """The directed links a transfer from worker ``src`` to ``dst`` crosses (none within
        a host)."""
        a, b = self.worker_host[src], self.worker_host[dst]
        if a == b:
            return []
        out = [("send", a), ("receive", b)]
        sa, sb = self.host_site[a], self.host_site[b]
        if sa != sb:
            out += [("wan-out", sa), ("wan-in", sb)]
        return out

    def _rate(self, link: tuple[str, int]) -> float:
        kind, index = link
        if kind in ("send", "receive"):
            return float(self.host_Bps[index])
        rate = self.site_wan_Bps[index]
        return math.inf if rate is None else float(rate)

    def rates(self, flows: Sequence[tuple[int, int]]) -> list[float]:
        """Each transfer's rate (bytes per second) when ``flows`` (sender, receiver worker
        pairs) all run at once: the smallest even share of the links it crosses (infinite
        within a host: the caller's loopback rate applies)."""
        crossing = [self._links(s, d) for s, d in flows]
        load = Counter(link for links in crossing for link in links)
        return [
            min((self._rate(x) / load[x] for x in links), default=math.inf) for links in crossing
        ]
