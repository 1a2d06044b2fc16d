"""The mcPipe reproduction's recipes, hosts files and testbed specs: plain text from plain data.

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

MNIST_TEST_SPLIT = 0.2  # of the 10,000-image MNIST test set: 8,000 train, 2,000 held out
MMAP_THRESHOLD = 131072  # memory runs: freed versions and pairs go back to the OS at once
MLP_WIDE = {"hidden": [2048, 2048, 2048]}  # the FC-heavy MLP of the specification's §7.5


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
    memory: bool = False  # a memory run: fixed glibc mmap threshold
    heartbeat_s: float | None = None  # None: the recipe's default

    @property
    def role(self) -> str:
        return "replica" if self.technique == "dataparallel" else "stage"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value) if isinstance(value, float) else str(value)


def data_text(w: Workload) -> str:
    if w.dataset == "digits":
        return 'dataset = "digits"\n'
    return f'dataset = "mnist"\nroot = {_toml(str(w.root))}\ntest_split = {MNIST_TEST_SPLIT}\n'


def recipe(w: Workload, r: RunSpec, name: str) -> str:
    """The recipe of one arm; ``{seed}`` is left for :class:`~edgetrain.reproduce.runs.Arm`."""
    options = "".join(f"{k} = {_toml(v)}\n" for k, v in w.options.items())
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
    section = "".join(f"{k} = {_toml(v)}\n" for k, v in pipeline.items())
    evaluator = '[[workers]]\nrole = "evaluator"\ncount = 1\n' if r.evaluator else ""
    beat = f"heartbeat_s = {float(r.heartbeat_s)!r}\n" if r.heartbeat_s is not None else ""
    parts = [
        f"[run]\nname = {_toml(name)}\nseed = \0\ncheckpoint_every = 0\n{beat}",
        f"[data]\n{data_text(w)}",
        f"[model]\nname = {_toml(w.model)}\n",
        f"[model.options]\n{options}" if options else "",
        f'[train]\nfamily = "pipeline"\ntechnique = {_toml(r.technique)}\n',
        f"epochs = {r.epochs}\nbatch_size = {w.microbatch}\nlr = {w.lr!r}\nmomentum = 0.0\n",
        f"[pipeline]\n{section}",
        f"[[workers]]\nrole = {_toml(r.role)}\ncount = {r.workers}\n{evaluator}",
    ]
    text = "".join(parts).replace("{", "{{").replace("}", "}}")
    return text.replace("\0", "{seed}")


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


def testbed_text(name: str, hosts: Sequence[HostSpec], lan: str, about: str) -> str:
    """A testbed spec of one site (``lan``: each host's link)."""
    lines = [f"# {about}", f"name = {_toml(name)}", f"description = {_toml(about)}", ""]
    lines += ["[[sites]]", 'name = "ethernet"', f"lan = {_toml(lan)}"]
    for h in hosts:
        lines += ["", "[[sites.hosts]]", f"name = {_toml(h.name)}", f"cpu = {h.cpu!r}"]
        lines.append(f"memory = {_toml(h.memory)}")
    return "\n".join(lines) + "\n"
