"""The mcPipe reproduction's recipes, hosts files and testbed specs, from plain data.

A :class:`Workload` is what every arm of a comparison shares (data, model, learning rate,
microbatch); a :class:`RunSpec` what one arm does (technique, stages, window, cuts, budget).
Stages (or data-parallel replicas) go one to a host in order, the evaluator shares the last
one's host (Local: the second host), so that it never sits with stage 0, whose memory the
memory-limit demonstration caps. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.experiment import recipes

MMAP_THRESHOLD = 131072  # memory runs: freed versions and pairs go back to the OS at once
CHUNK_MIB = 1.0  # memory runs: chunked unit kernels (specification §6.7: c = 0.25 M floats)
MLP_WIDE = {"hidden": [2048, 2048, 2048]}  # the FC-heavy MLP of the specification's §7.5
# a deeper MLP of equal layers: stages of about equal compute on 2 and 3 hosts
MLP_DEEP = {"hidden": [1024] * 6}


@dataclass(frozen=True)
class Workload:
    """What every arm of a comparison shares."""

    dataset: str  # "mnist" or "digits"
    model: str
    options: Mapping[str, Any] = field(default_factory=dict)
    lr: float = 0.05
    microbatch: int = 16
    root: Path | None = None

    @property
    def label(self) -> str:
        hidden = self.options.get("hidden")
        if self.model == "mlp" and hidden:
            return "mlp-" + "-".join(str(h) for h in hidden)
        return self.model


@dataclass(frozen=True)
class RunSpec:
    """One arm: ``workers`` stages (or replicas for ``dataparallel``)."""

    technique: str
    workers: int
    extra: int = 0
    split: tuple[int, ...] | None = None
    evaluator: bool = True
    budget_s: float | None = None
    microbatches: int | None = None  # per epoch
    epochs: int = 100
    snapshot_every: int = 0
    memory: bool = False  # a memory run: fixed glibc mmap threshold, chunked unit kernels
    heartbeat_s: float | None = None  # None: the recipe's default

    @property
    def role(self) -> str:
        return "replica" if self.technique == "dataparallel" else "stage"


def data_table(w: Workload) -> dict[str, Any]:
    return recipes.data(w.dataset, w.root)


def recipe(w: Workload, r: RunSpec, name: str) -> str:
    """The recipe of one arm; ``{seed}`` is left for :class:`~edgetrain.experiment.arms.Arm`."""
    pipeline: dict[str, Any] = {
        "microbatch": w.microbatch,
        "window_extra": r.extra,
        "snapshot_every": r.snapshot_every if r.evaluator else 0,
    }
    if r.split is not None and r.role == "stage":
        pipeline["split"] = list(r.split)
    if r.budget_s is not None:
        pipeline["budget_s"] = float(r.budget_s)
    if r.microbatches is not None:
        pipeline["microbatches"] = r.microbatches
    if r.memory:
        pipeline["mmap_threshold"] = MMAP_THRESHOLD
        pipeline["chunk_mib"] = CHUNK_MIB
    workers = [{"role": r.role, "count": r.workers}]
    if r.evaluator:
        workers.append({"role": "evaluator", "count": 1})
    train = {"family": "pipeline", "technique": r.technique, "epochs": r.epochs}
    train |= {"batch_size": w.microbatch, "lr": w.lr, "momentum": 0.0}
    beat = float(r.heartbeat_s) if r.heartbeat_s is not None else None
    sections = {"pipeline": pipeline}
    return recipes.recipe(
        name, data_table(w), w.model, train, workers, sections, heartbeat_s=beat, options=w.options
    )


def slots(r: RunSpec, hosts: int) -> list[int]:
    """Worker slots per testbed host, in host order, for ``r``'s workers in recipe order: one
    stage (or replica) per host, the evaluator on the last of them (with a single stage: on the
    next host, when there is one)."""
    if r.workers > hosts:
        raise ValueError(f"{r.workers} {r.role}s do not fit {hosts} hosts")
    out = [1 if k < r.workers else 0 for k in range(hosts)]
    if r.evaluator:
        out[min(r.workers, hosts - 1) if r.workers == 1 else r.workers - 1] += 1
    return out


def hosts_text(testbed_hosts: Mapping[str, Any], per_host: Sequence[int]) -> str:
    """A hosts file from a testbed's (parsed) ``hosts.toml``: host k gets ``per_host[k]`` worker
    slots, hosts with none are left out."""
    from edgetrain.launch.hosts import parse_hosts, to_toml

    data = dict(testbed_hosts)
    chosen = []
    for host, n in zip(data["hosts"], per_host, strict=False):
        if n:
            chosen.append({**host, "workers": n})
    data["hosts"] = chosen
    return to_toml(parse_hosts(data, "the testbed's hosts.toml"))


@dataclass(frozen=True)
class HostSpec:
    name: str
    cpu: float
    memory: str


#: The laptops' CPU quota period. A laptop is slow all the time, not in bursts: at the kernel's
#: 100 ms a 0.6-core host runs 60 ms at full speed and then stops for 40, and a pipeline whose
#: stages wait on each other within a microbatch (a round trip of about 25 ms here) stalls
#: whenever either host is stopped. Measured with the 100 ms period (``--quick``, one seed):
#: PipeDream 1.19x Local per microbatch where the cost model, which runs each host at its
#: average share, predicted 1.84x; at 10 ms, 1.07x to 1.35x over two such runs. 10 ms makes each
#: stop shorter than a microbatch.
CPU_PERIOD_MS = 10


def testbed_doc(
    name: str,
    hosts: Sequence[HostSpec],
    lan: str,
    about: str,
    cpu_period_ms: int = CPU_PERIOD_MS,
) -> dict[str, Any]:
    """A testbed spec of one site (``lan``: each host's link; every host's quota period
    ``cpu_period_ms``)."""
    members = [{"name": h.name, "cpu": h.cpu, "memory": h.memory} for h in hosts]
    site = {"name": "ethernet", "lan": lan, "hosts": members}
    return {
        "name": name,
        "description": about,
        "cpu_period_ms": cpu_period_ms,
        "sites": [site],
    }
