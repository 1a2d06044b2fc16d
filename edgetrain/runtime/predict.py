"""What a technique's cost model reads and answers: the devices and links of a setting, the
model's profiled layers, and the predicted iteration with its parts. Pure data.

A technique's ``predict`` hook (:class:`~edgetrain.runtime.base.TechniqueSide`) takes a
:class:`Setting` and returns a :class:`Prediction`, or None where it has no cost model yet.
Times are seconds, sizes bytes, rates bytes per second.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from edgetrain.runtime.sharing import Topology

__all__ = [
    "MESSAGE_CPU_S",
    "WIRE_CPU_S_PER_BYTE",
    "Device",
    "Layer",
    "Link",
    "Prediction",
    "Setting",
]

# CPU seconds per byte of one side of a message (encode and send, or receive, check and
# decode) on one core of this project's 2-core machine: half the inverse of edgetrain's
# loopback throughput between two processes at 16 MiB (0.704 GB/s, benchmarks/transport)
WIRE_CPU_S_PER_BYTE = 0.71e-9
# CPU seconds of one core per message sent or received between a parameter-server family's
# processes, beside its bytes' own cost: the hand-off between the training thread and the
# thread that owns the sockets, ZeroMQ's send and receive, each message's checks, the Python
# around them. Measured on this project's 2-core machine with a 1,210-parameter MLP (compute
# 0.8 ms of CPU a step, measured apart), multi-PS SGD on digits, batch 32, 80 iterations an
# epoch, no quota: process CPU less compute came to 1.25 ms an iteration with 2 devices (4
# messages) and 4.3 ms with 4 (12)
MESSAGE_CPU_S = 0.33e-3


@dataclass(frozen=True)
class Device:
    """One worker's device: how fast it computes next to the profiled one (``speed`` 0.5: half
    as fast), its memory (None: not known) and, where its speed is a CPU quota, the quota's
    period in seconds (None: no quota, or not known; a cost model that reads it runs the device
    at the reference speed until its quota, ``speed`` x the period, is spent)."""

    name: str
    speed: float = 1.0
    memory_bytes: int | None = None
    quota_period_s: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.speed) and self.speed > 0):
            raise ValueError(f"device {self.name}: speed must be a positive number")
        period = self.quota_period_s
        if period is not None and not (math.isfinite(period) and period > 0):
            raise ValueError(f"device {self.name}: quota_period_s must be a positive number")


@dataclass(frozen=True)
class Link:
    """A link between two workers (or, with ``a``/``b`` None, every link not named)."""

    bandwidth_Bps: float
    latency_s: float = 0.0
    a: int | None = None
    b: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bandwidth_Bps) and self.bandwidth_Bps > 0):
            raise ValueError("a link's bandwidth must be a positive number of bytes per second")
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise ValueError("a link's latency must be a non-negative number of seconds")


@dataclass(frozen=True)
class Layer:
    """One layer as profiled on the reference device, for one minibatch: forward and backward
    seconds, parameter bytes and output (activation) bytes."""

    name: str
    forward_s: float
    backward_s: float
    param_bytes: int
    activation_bytes: int = 0


@dataclass(frozen=True)
class Setting:
    """Where a run would go: one device per worker (in worker order), the links, the layers
    (profiled at ``batch`` samples; None: at the recipe's ``[train] batch_size``) and the cores
    the layers' seconds are at (``reference_cores``: a CPU quota's share where the profile ran
    under one; None: not known, taken as one core), which turns a model's CPU seconds of work
    into the reference device's seconds."""

    devices: Sequence[Device]
    links: Sequence[Link]
    layers: Sequence[Layer]
    batch: int | None = None
    reference_cores: float | None = None
    # which links concurrent transfers share (None: not known; each pair's link its own)
    topology: Topology | None = None

    def __post_init__(self) -> None:
        cores = self.reference_cores
        if cores is not None and not (math.isfinite(cores) and cores > 0):
            raise ValueError("a setting's reference_cores must be a positive number")

    def cpu_s(self, work: float) -> float:
        """``work`` CPU seconds of one thread on one core as seconds of the reference device
        (which gives one thread at most one core)."""
        return work / min(self.reference_cores or 1.0, 1.0)

    def concurrent_Bps(self, flows: Sequence[tuple[int, int]]) -> list[float]:
        """Each transfer's rate when ``flows`` (sender, receiver worker pairs) run at once:
        its pair's link, or less where the topology has it share a link with the others."""
        alone = [self.link(a, b).bandwidth_Bps for a, b in flows]
        if self.topology is None:
            return alone
        return [min(x, y) for x, y in zip(alone, self.topology.rates(flows), strict=True)]

    def at_batch(self, batch: int) -> Setting:
        """The same setting with its layers scaled linearly to ``batch`` samples (times and
        activation bytes; unchanged when the layers' batch is not known)."""
        if self.batch is None or self.batch == batch:
            return self
        scale = batch / self.batch
        layers = tuple(
            Layer(
                x.name,
                x.forward_s * scale,
                x.backward_s * scale,
                x.param_bytes,
                int(x.activation_bytes * scale),
            )
            for x in self.layers
        )
        return Setting(self.devices, self.links, layers, batch, self.reference_cores)

    def link(self, a: int, b: int) -> Link:
        """The link between workers ``a`` and ``b``: the one named for the pair, else the
        default (``a``/``b`` None); ValueError when there is neither."""
        default = None
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
            if link.a is None and link.b is None:
                default = link
        if default is None:
            raise ValueError(f"the setting has no link between workers {a} and {b}")
        return default


@dataclass(frozen=True)
class Prediction:
    """A technique's predicted iteration: its time, the parts it adds up from (``compute``,
    ``communication``, ``exposed_communication``, ``overhead``, ...), bytes per iteration
    and one-line notes that say why; ``memory_bytes``: predicted resident bytes per worker
    index, where the model predicts memory; ``per_worker``: each worker's own busy seconds per
    iteration, where the model tells workers apart."""

    technique: str
    iteration_s: float
    parts: Mapping[str, float] = field(default_factory=dict)
    bytes_per_iteration: int = 0
    notes: tuple[str, ...] = ()
    memory_bytes: Mapping[int, int] = field(default_factory=dict)
    # each worker's own busy seconds per iteration (its steps and its own work, no waiting),
    # where the model tells them apart (the gossip family): beside each worker's measurement
    per_worker: Mapping[int, float] = field(default_factory=dict)
