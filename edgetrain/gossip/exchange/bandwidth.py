"""Link classes and bandwidth per link for the exchange techniques (gossip.md B.5). Pure.

Two workers in the same site (the hosts file's ``site``) share a LAN link, workers in
different sites a WAN link; with no sites every link is LAN. A link's starting bandwidth is the
recipe's rate shared by everything that crosses the same bottleneck: a host's LAN rate (the
emulator shapes each host's own link) by all its destinations, a site's WAN rate by every flow
leaving the site. Live, a link's estimate is an EWMA (alpha 0.3) of the goodput its receiver
acknowledges, bytes / (ack time - send time), from acknowledgements of messages that arrived
while the receiver was waiting for them (one read after a busy compute step would count the
receiver's compute as the link's time) and big enough that latency does not dominate.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

LAN = "lan"
WAN = "wan"
MBIT = 1e6 / 8  # bytes per second in one Mbit/s
MIN_SAMPLE_BYTES = 16 * 1024
CLAMP = (1 / 64, 4.0)  # a live estimate stays within these multiples of the starting one


def site_of(worker: int, sites: Mapping[int, str | None]) -> str:
    """A worker's site name ("" when the run names none)."""
    return sites.get(worker) or ""


def link_class(a: int, b: int, sites: Mapping[int, str | None]) -> str:
    return LAN if site_of(a, sites) == site_of(b, sites) else WAN


def members(sites: Mapping[int, str | None], alive: Collection[int]) -> dict[str, list[int]]:
    """Site -> its workers (ascending), over the ``alive`` workers."""
    out: dict[str, list[int]] = {}
    for w in sorted(alive):
        out.setdefault(site_of(w, sites), []).append(w)
    return out


def starting_bandwidth(
    me: int,
    destinations: Collection[int],
    sites: Mapping[int, str | None],
    everyone: Collection[int],
    lan_bps: float,
    wan_bps: float,
) -> dict[int, float]:
    """Bytes/s each of ``me``'s links starts from, all of ``everyone`` sending to each other."""
    if not destinations:
        return {}
    share = lan_bps / len(destinations)
    mine = site_of(me, sites)
    inside = [w for w in everyone if site_of(w, sites) == mine]
    leaving = len(inside) * (len(everyone) - len(inside))  # flows from this site out
    out: dict[int, float] = {}
    for q in destinations:
        if site_of(q, sites) == mine:
            out[q] = share
        else:
            out[q] = min(share, wan_bps / max(1, leaving))
    return out


@dataclass
class Bandwidth:
    """One link's bandwidth estimate (bytes/s)."""

    start: float
    alpha: float = 0.3
    live: bool = True
    value: float = 0.0
    samples: int = 0

    def __post_init__(self) -> None:
        self.value = self.value or self.start

    def observe(self, nbytes: int, seconds: float, fresh: bool) -> bool:
        """Take one acknowledged message into the estimate; True if it counted."""
        if not self.live or not fresh or nbytes < MIN_SAMPLE_BYTES or seconds <= 0:
            return False
        low, high = self.start * CLAMP[0], self.start * CLAMP[1]
        sample = min(high, max(low, nbytes / seconds))
        self.value += self.alpha * (sample - self.value)
        self.samples += 1
        return True
