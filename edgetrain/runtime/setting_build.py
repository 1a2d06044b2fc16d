"""A cost model's :class:`~edgetrain.runtime.predict.Setting` from what a user has: a profile
(``RUN/profiles/<host>.json``: each layer's forward and backward seconds at a batch size) and a
testbed spec (each host's CPU share and memory, each site's LAN and WAN rate). Pure: no files
are read here, no network is touched.

- **Layers**: the profile's, scaled linearly from its first batch size to the run's batch
  (times and activation bytes; parameter bytes stay).
- **Devices**: one per worker slot, hosts in spec order with ``workers`` slots each (the order
  of the ``hosts.toml`` that ``emulate up`` writes, so worker i is slot i). A device's speed is
  its host's CPU share over the workers sharing it, relative to ``reference_cpu``: the cores
  the profile was measured with.
- **Links**: one per pair of workers, the bottleneck rate of the path between their hosts (its
  access or LAN link, and both sites' WAN uplinks across sites); workers on one host talk over
  loopback (:data:`LOOPBACK_BPS`). tbf adds no latency: a link's latency is ``latency_s``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from edgetrain.emulate.spec import TestbedSpec
from edgetrain.emulate.topology import build
from edgetrain.runtime.predict import Device, Layer, Link, Setting

LOOPBACK_BPS = 8e9  # bytes/s: what this project's transport moves between two local processes
_SUBNET = "10.231.0.0/24"  # any /24: building the topology only names its parts


def layers_from_profile(profile: Mapping[str, Any], batch: int) -> tuple[Layer, ...]:
    """The profile's layers at ``batch`` samples (ValueError when it has none)."""
    rows = [x for x in profile.get("layers", []) if isinstance(x, Mapping)]
    if not rows:
        raise ValueError("the profile has no layers: profile the model (edgetrain profile)")
    sizes = profile.get("batch_sizes") or [batch]
    scale = batch / float(sizes[0])
    return tuple(
        Layer(
            name=str(x["name"]),
            forward_s=float(x["fwd_s"]) * scale,
            backward_s=float(x["bwd_s"]) * scale,
            param_bytes=int(x["param_bytes"]),
            activation_bytes=int(int(x.get("activation_bytes", 0)) * scale),
        )
        for x in rows
    )


def worker_hosts(spec: TestbedSpec, workers: int | None = None) -> list[str]:
    """The host of each worker slot (hosts in spec order, ``workers`` slots each), the first
    ``workers`` of them (ValueError when the testbed has fewer)."""
    slots = [h.name for _, h in spec.hosts for _ in range(h.workers)]
    if workers is not None:
        if workers > len(slots):
            raise ValueError(
                f"testbed {spec.name} has {len(slots)} worker slots for {workers} workers"
            )
        slots = slots[:workers]
    return slots


def setting_from_testbed(
    spec: TestbedSpec,
    layers: Sequence[Layer],
    *,
    reference_cpu: float,
    workers: int | None = None,
    latency_s: float = 0.0,
    batch: int | None = None,
) -> Setting:
    """The setting of ``workers`` workers (default: every slot) placed on ``spec``'s hosts
    (``batch``: the samples the layers were profiled at, None: the recipe's batch)."""
    if not reference_cpu > 0:
        raise ValueError("reference_cpu (the cores the profile was measured with) must be > 0")
    topo = build(spec, spec.subnet or _SUBNET)
    hosts = worker_hosts(spec, workers)
    per_host = {name: hosts.count(name) for name in set(hosts)}
    devices = []
    for name in hosts:
        node = topo.host(name)
        devices.append(
            Device(name, speed=node.cpu / per_host[name] / reference_cpu, memory_bytes=node.memory)
        )
    links = []
    for a, b in itertools.combinations(range(len(hosts)), 2):
        if hosts[a] == hosts[b]:
            links.append(Link(LOOPBACK_BPS, 0.0, a, b))
        else:
            links.append(Link(topo.path_bps(hosts[a], hosts[b]) / 8.0, latency_s, a, b))
    return Setting(tuple(devices), tuple(links), tuple(layers), batch)
