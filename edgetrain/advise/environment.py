"""The devices and links a run would go to, as the cost models read them: a
:class:`~edgetrain.runtime.setting_build.TestbedFacts` (each host's CPU share, worker slots,
memory, link rate and site), the cores the profile's layer times are at, the round trip, and
each host's labels. Built from an emulated testbed's facts, from each host's own profile, or
for local processes on this machine. Pure: no files, no network.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from edgetrain.runtime.setting_build import LOOPBACK_BPS, HostFacts, TestbedFacts

__all__ = ["Environment", "HostEntry", "from_profiles", "local", "step_seconds"]


@dataclass(frozen=True)
class Environment:
    """Hosts and links; ``reference_cpu``: the cores the profile's layer times are at (a host
    of ``cpu`` cores runs ``cpu / reference_cpu`` times as fast); ``latency_s``: one way."""

    facts: TestbedFacts
    reference_cpu: float
    latency_s: float = 0.0
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    source: str = ""

    @property
    def slots(self) -> int:
        return sum(h.workers for h in self.facts.hosts)

    def slot_hosts(self) -> list[str]:
        """The host of each worker slot, hosts in order."""
        return [h.name for h in self.facts.hosts for _ in range(h.workers)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "reference_cpu": self.reference_cpu,
            "latency_s": self.latency_s,
            **self.facts.as_dict(),
        }


@dataclass(frozen=True)
class HostEntry:
    """A host of a hosts file: name, worker slots, memory (bytes; None: not given), site and
    labels."""

    name: str
    workers: int = 1
    memory: int | None = None
    site: str | None = None
    labels: tuple[str, ...] = ()


def step_seconds(profile: Mapping[str, Any]) -> float:
    """A profile's layers' forward and backward seconds summed, per sample (its first batch
    size), or ValueError when it has no layer times."""
    rows = [x for x in profile.get("layers") or [] if isinstance(x, Mapping)]
    total = sum(float(x.get("fwd_s", 0.0)) + float(x.get("bwd_s", 0.0)) for x in rows)
    batch = (profile.get("batch_sizes") or [1])[0]
    if not total > 0 or not isinstance(batch, int) or batch < 1:
        raise ValueError("the profile has no layer times")
    return total / batch


def from_profiles(
    hosts: Sequence[HostEntry],
    profiles: Mapping[str, Mapping[str, Any]],
    reference: str,
    reference_cpu: float,
    default_bps: float | None = None,
) -> Environment:
    """Each host's speed from its own profile: ``reference``'s layer time per sample over the
    host's, in the reference's cores; its memory from the hosts file, else its profile's
    device; its link rate (bits/s) the median of the bandwidths its profile probed
    (``edgetrain profile --peer``), else ``default_bps``; the one-way latency half the median
    round trip probed. ValueError naming a host without a profile or a link figure."""
    ref = step_seconds(profiles[reference])
    out, rtts = [], []
    for h in hosts:
        prof = profiles.get(h.name)
        if prof is None:
            raise ValueError(f"host {h.name} has no profile")
        links = [x for x in prof.get("links") or [] if isinstance(x, Mapping)]
        rates = [float(x["bandwidth_Bps"]) * 8 for x in links if _pos(x.get("bandwidth_Bps"))]
        rtts += [float(x["rtt_s"]) for x in links if _pos(x.get("rtt_s"))]
        rate = statistics.median(rates) if rates else default_bps
        if rate is None:
            raise ValueError(f"host {h.name} has no link figure")
        device = prof.get("device") or {}
        memory = h.memory or (
            device.get("memory_bytes") if _pos(device.get("memory_bytes")) else None
        )
        cpu = reference_cpu * ref / step_seconds(prof)
        out.append(HostFacts(h.name, cpu, int(rate), h.workers, memory, h.site))
    facts = TestbedFacts("hosts", tuple(out), {})
    latency = statistics.median(rtts) / 2 if rtts else 0.0
    labels = {h.name: tuple(h.labels) for h in hosts}
    return Environment(facts, reference_cpu, latency, labels, "each host's profile")


def local(
    cores: float, slowdowns: Sequence[float], reference_cpu: float, memory: int | None = None
) -> Environment:
    """Local processes on this machine, one per slot: each an equal share of its ``cores`` (at
    most one core: a worker runs one thread) over its ``slowdown``, loopback between them;
    ``reference_cpu``: the cores the profile ran with."""
    n = max(1, len(slowdowns))
    share = min(1.0, cores / n)
    hosts = tuple(
        HostFacts(f"local-{i}", share / max(1.0, s), int(LOOPBACK_BPS * 8), 1, memory)
        for i, s in enumerate(slowdowns or [1.0])
    )
    facts = TestbedFacts("this machine", hosts, {})
    return Environment(facts, reference_cpu, 0.0, {}, "local processes on this machine")


def _pos(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0
