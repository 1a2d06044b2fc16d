"""A cost model's :class:`~edgetrain.runtime.predict.Setting` from what a user has: a profile
(``RUN/profiles/<host>.json``: each layer's forward and backward seconds at a batch size) and a
testbed's facts (each host's CPU share, memory and link rate, each site's WAN rate: what
``emulate up`` writes into its ``hosts.toml`` as a ``testbed`` table). Pure: no files are read
here, no network is touched.

- **Layers**: the profile's, scaled linearly from its first batch size to the run's batch
  (times and activation bytes; parameter bytes stay).
- **Devices**: one per worker slot, hosts in order with ``workers`` slots each (the order of
  the ``hosts.toml`` that ``emulate up`` writes, so worker i is slot i). A device's speed is
  its host's CPU share over the workers sharing it, relative to ``reference_cpu``: the cores
  the profile was measured with. A worker with less than a core of a host whose quota period
  is known runs under that quota (``Device.quota_period_s``: in bursts at full speed, stalled
  to the next period once the quota is spent).
- **Links**: one per pair of workers, the bottleneck rate of the path between their hosts
  (both hosts' links, and both sites' WAN uplinks across sites); workers on one host talk over
  loopback (:data:`LOOPBACK_BPS`). tbf adds no latency: a link's latency is ``latency_s``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from edgetrain.runtime.predict import Device, Layer, Link, Setting
from edgetrain.runtime.sharing import Topology

LOOPBACK_BPS = 8e9  # bytes/s: what this project's transport moves between two local processes


@dataclass(frozen=True)
class HostFacts:
    """One host: its CPU share in cores, worker slots, memory cap (bytes), site, its link's
    rate in bits/s, and the period of its CPU quota in seconds (None: not known; an emulated
    host's ``cpu_period_ms``)."""

    name: str
    cpu: float
    link_bps: int
    workers: int = 1
    memory: int | None = None
    site: str | None = None
    quota_period_s: float | None = None


@dataclass(frozen=True)
class TestbedFacts:
    """What a cost model needs of a testbed: its hosts, and each site's WAN rate (bits/s, None:
    no WAN, one site)."""

    name: str
    hosts: tuple[HostFacts, ...]
    wan_bps: Mapping[str, int | None]

    def host(self, name: str) -> HostFacts:
        return next(h for h in self.hosts if h.name == name)

    def path_bps(self, a: str, b: str) -> int:
        """The bottleneck rate between hosts ``a`` and ``b``."""
        ha, hb = self.host(a), self.host(b)
        rates = [ha.link_bps, hb.link_bps]
        if ha.site != hb.site:
            wans = (self.wan_bps.get(ha.site or ""), self.wan_bps.get(hb.site or ""))
            rates += [r for r in wans if r]
        return min(rates)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for a TOML table (None left out)."""
        hosts = [{k: v for k, v in asdict(h).items() if v is not None} for h in self.hosts]
        sites = [{"name": s, "wan_bps": r} for s, r in self.wan_bps.items() if r is not None]
        return {"name": self.name, "hosts": hosts, "sites": sites}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TestbedFacts:
        """The facts from :meth:`as_dict`'s form (ValueError naming what is wrong)."""
        hosts = data.get("hosts")
        if not isinstance(hosts, list) or not hosts:
            raise ValueError("a testbed table needs a list of hosts")
        out = []
        for h in hosts:
            if not isinstance(h, Mapping) or not isinstance(h.get("name"), str):
                raise ValueError("each testbed host needs a name")
            cpu, rate, slots = (
                _positive(h.get("cpu")),
                _positive(h.get("link_bps")),
                h.get("workers", 1),
            )
            memory = _positive(h.get("memory"))
            period = _positive(h.get("quota_period_s"))
            ok = cpu is not None and rate is not None and isinstance(slots, int) and slots >= 1
            ok = ok and (period is not None or h.get("quota_period_s") is None)
            if not ok or (memory is None and h.get("memory") is not None):
                raise ValueError(
                    f"testbed host {h['name']!r}: cpu, link_bps, workers, memory, quota_period_s"
                )
            assert cpu is not None and rate is not None and isinstance(slots, int)
            site = h.get("site")
            out.append(
                HostFacts(
                    h["name"],
                    cpu,
                    int(rate),
                    slots,
                    None if memory is None else int(memory),
                    site if isinstance(site, str) else None,
                    period,
                )
            )
        wan: dict[str, int | None] = {}
        for s in data.get("sites") or []:
            if isinstance(s, Mapping) and isinstance(s.get("name"), str):
                wan_rate = _positive(s.get("wan_bps"))
                wan[s["name"]] = None if wan_rate is None else int(wan_rate)
        return cls(str(data.get("name") or "testbed"), tuple(out), wan)


def _positive(x: Any) -> float | None:
    """``x`` as a positive finite number, or None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) and x > 0 else None


def sustained_scale(profile: Mapping[str, Any], family: str | None = None) -> float:
    """The factor that turns the profile's layer times (the faster half of its hooked steps:
    under a CPU quota, the burst pace) into a step's sustained seconds as ``family`` runs it:
    its own kernels' sustained step where the profile timed them (``edgetrain profile --kernels
    FAMILY``: ``kernels.<family>``), else the profile's sustained plain step, over the layers'
    sum, all at the profile's first batch size. 1.0 when the profile has neither, or timed the
    kernels at another batch size. A cost model that runs each device at its average CPU share
    reads the layers so scaled at :func:`profile_cores` cores."""
    rows = [x for x in profile.get("layers") or [] if isinstance(x, Mapping)]
    total = sum(float(x.get("fwd_s", 0.0)) + float(x.get("bwd_s", 0.0)) for x in rows)
    if not total > 0:
        return 1.0
    kernels = profile.get("kernels")
    mine = kernels.get(family) if isinstance(kernels, Mapping) and family else None
    batch = (profile.get("batch_sizes") or [None])[0]
    if isinstance(mine, Mapping) and mine.get("batch") == batch:
        step = mine.get("sustained_step_s", mine.get("step_s"))
    else:
        plain = profile.get("step_s")
        step = profile.get("sustained_step_s")
        if isinstance(step, (int, float)) and isinstance(plain, (int, float)) and plain > 0:
            # the layers add up to the hooked step: scale them by the plain step's throttling
            return float(step) / float(plain)
        return 1.0
    return float(step) / total if isinstance(step, (int, float)) and step > 0 else 1.0


def profile_cores(profile: Mapping[str, Any], default: float) -> float:
    """The cores a profile's sustained figures (:func:`sustained_scale`) are at: its CPU quota's
    where it was measured under one (``cpu_quota``), else ``default`` (the profiled host's)."""
    quota = profile.get("cpu_quota")
    cores = quota.get("cores") if isinstance(quota, Mapping) else None
    return float(cores) if isinstance(cores, (int, float)) and cores > 0 else default


def layers_from_profile(
    profile: Mapping[str, Any], batch: int, scale: float = 1.0
) -> tuple[Layer, ...]:
    """The profile's layers at ``batch`` samples (ValueError when it has none), their times
    multiplied by ``scale`` (:func:`sustained_scale`, say)."""
    rows = [x for x in profile.get("layers", []) if isinstance(x, Mapping)]
    if not rows:
        raise ValueError("the profile has no layers: profile the model (edgetrain profile)")
    sizes = profile.get("batch_sizes") or [batch]
    per_batch = batch / float(sizes[0])
    return tuple(
        Layer(
            name=str(x["name"]),
            forward_s=float(x["fwd_s"]) * scale * per_batch,
            backward_s=float(x["bwd_s"]) * scale * per_batch,
            param_bytes=int(x["param_bytes"]),
            activation_bytes=int(int(x.get("activation_bytes", 0)) * per_batch),
        )
        for x in rows
    )


def worker_hosts(facts: TestbedFacts, workers: int | None = None) -> list[str]:
    """The host of each worker slot (hosts in order, ``workers`` slots each), the first
    ``workers`` of them (ValueError when the testbed has fewer)."""
    slots = [h.name for h in facts.hosts for _ in range(h.workers)]
    if workers is not None:
        if workers > len(slots):
            raise ValueError(
                f"testbed {facts.name} has {len(slots)} worker slots for {workers} workers"
            )
        slots = slots[:workers]
    return slots


def setting_from_testbed(
    facts: TestbedFacts,
    layers: Sequence[Layer],
    *,
    reference_cpu: float,
    workers: int | None = None,
    latency_s: float = 0.0,
    batch: int | None = None,
) -> Setting:
    """The setting of ``workers`` workers (default: every slot) placed on the testbed's hosts
    (``batch``: the samples the layers were profiled at, None: the recipe's batch)."""
    hosts = worker_hosts(facts, workers)
    return setting_on_hosts(
        facts, hosts, layers, reference_cpu=reference_cpu, latency_s=latency_s, batch=batch
    )


def setting_on_hosts(
    facts: TestbedFacts,
    hosts: Sequence[str],
    layers: Sequence[Layer],
    *,
    reference_cpu: float,
    latency_s: float = 0.0,
    batch: int | None = None,
) -> Setting:
    """The setting of one worker on each of ``hosts`` (worker i on ``hosts[i]``, a host named
    as often as it runs workers, which then share its CPU share)."""
    if not reference_cpu > 0:
        raise ValueError("reference_cpu (the cores the profile was measured with) must be > 0")
    per_host = {name: hosts.count(name) for name in set(hosts)}
    devices = []
    for name in hosts:
        node = facts.host(name)
        share = node.cpu / per_host[name]
        period = node.quota_period_s if share < 1.0 else None
        devices.append(
            Device(
                name,
                speed=share / reference_cpu,
                memory_bytes=node.memory,
                quota_period_s=period,
            )
        )
    links = []
    for a, b in itertools.combinations(range(len(hosts)), 2):
        if hosts[a] == hosts[b]:
            links.append(Link(LOOPBACK_BPS, 0.0, a, b))
        else:
            links.append(Link(facts.path_bps(hosts[a], hosts[b]) / 8.0, latency_s, a, b))
    return Setting(
        tuple(devices), tuple(links), tuple(layers), batch, reference_cpu, topology(facts, hosts)
    )


def topology(facts: TestbedFacts, hosts: Sequence[str]) -> Topology:
    """The links that one worker on each of ``hosts`` shares with the others (each host's own
    link, each site's WAN uplink)."""
    names = list(dict.fromkeys(hosts))
    nodes = [facts.host(n) for n in names]
    sites = list(dict.fromkeys(node.site or "" for node in nodes))
    wan = [facts.wan_bps.get(site) if site else None for site in sites]
    return Topology(
        worker_host=tuple(names.index(h) for h in hosts),
        host_Bps=tuple(node.link_bps / 8.0 for node in nodes),
        host_site=tuple(sites.index(node.site or "") for node in nodes),
        site_wan_Bps=tuple(r / 8.0 if r else None for r in wan),
    )
