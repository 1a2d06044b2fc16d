"""Mercury's iteration-time model (``mercury`` and the uniform ``multips-sgd``), the terms of Eq. 5
([MC §3.2]) as this runtime spends them. Pure.

Every device computes its minibatch (``T_cp``: the profiled layers' forward + backward over its
speed; the slowest device sets the pace, since every shard waits for all K slices), then sends
each owner its slice and gets the average back: ``T_cm = 2 (K - 1) / K x P / bandwidth`` plus
one round trip, over the slowest link between devices. Importance sampling adds ``T_is``:

- sequential scheduler: the refresh of a group of ``G`` samples (one forward each) and the
  round's resharding piece both sit in the iteration;
- BACC: the refresh runs while the aggregation is on the network. A fixed group shows only
  what outlasts ``T_cm``; an anytime refresh stops when the aggregation ends, so it shows the
  wait for the chunk in flight then (half a chunk on average), and its first chunk where that
  outlasts ``T_cm`` or the device has one core or less (the refresh then takes the core the
  aggregation's own work needs; the inflation the reproduction measured) unless the batch's
  own losses are that chunk (``batch_refresh``: every refresh is then optional, paced by the
  CPU the training leaves). Resharding fills the link while the device computes, sized by
  the link budget to fit there, so it adds nothing.

A priori (from the profile alone, whose step is SGD with momentum) the compute adds, per byte
of parameters, Adam's step beyond that one (:data:`ADAM_EXTRA_CPU_S_PER_BYTE`, where the run
steps with Adam) and the gradient flattened into one vector (:data:`FLATTEN_CPU_S_PER_BYTE`);
the aggregation adds its bytes' own CPU, ``4 (K - 1) / K x P`` a device (its slices out and
in, the averages out and in) at :data:`~edgetrain.runtime.predict.WIRE_CPU_S_PER_BYTE` (shown
as ``aggregation_overhead``): CPU seconds of one core, in the profile's seconds by the cores it
ran at, over the slowest device's speed. On the 10M-parameter MLP these came to 121 ms of one
core an iteration, most of what multi-PS SGD measured beyond the model before (advise's check,
benchmarks/advise). Each message of the aggregation, ``4 (K - 1)`` a device, adds its own CPU
(:data:`~edgetrain.runtime.predict.MESSAGE_CPU_S`), also in ``aggregation_overhead``. Where
the slowest device runs under a CPU quota (its ``quota_period_s``), a wait on the link refills
it, so its work then runs at the reference speed: the iteration is ``max(work, work x speed +
link)`` rather than ``work + link`` (``quota_overlap``: on DynaComm's testbed, a 0.4-core
device behind a 50 Mbit/s WAN, the link's 59 ms outlast the quota's stalls). Still left out:
drawing the minibatch from the cache, the hash checks, and the emulator's hosts sharing one
machine's cores (its bursts are at most the machine's cores over its busy hosts). A
:class:`Calibration` (a uniform run's measured ``T_cp`` and ``T_cm`` at one rate, the paper's
"measured" terms of Eq. 5) replaces the a priori terms with what the run measured, at every rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from edgetrain.ps.mercury.config import Settings
from edgetrain.runtime.predict import MESSAGE_CPU_S, WIRE_CPU_S_PER_BYTE, Prediction, Setting

# CPU seconds of one core per byte of parameters, one thread, measured on this project's 2-core
# machine at 10.0M parameters, out of cache (44k in LeNet-5-like tensors, in cache, gave 1.20
# and 0.08 ns): Adam's step took 1.34 ns a byte against SGD with momentum's 0.25 (the
# profile's step holds SGD's), torch.cat of the gradients into the vector sent 0.50 ns
ADAM_EXTRA_CPU_S_PER_BYTE = 1.09e-9
FLATTEN_CPU_S_PER_BYTE = 0.50e-9


@dataclass(frozen=True)
class Shape:
    """What the recipe and data fix: the devices (worker indices), the minibatch, each
    device's samples (None: not known, the refresh is then one chunk) and one sample's
    bytes on the wire (for resharding)."""

    devices: Sequence[int]
    batch: int
    samples_per_device: int | None = None
    sample_bytes: int = 0
    cores: float | None = None  # the slowest device's cores (None: more than one)
    calibration: Calibration | None = None  # a uniform run's measured terms (None: a priori)


@dataclass(frozen=True)
class Calibration:
    """A uniform (``multips-sgd``) run's measured terms per iteration on these devices, at a
    link rate: Eq. 5 with the measured ``T_cp`` and ``T_cm`` ([MC §3.2]). The model then takes
    the measured compute (the optimiser step and the gradient's flattening included, which the
    profile leaves out), and the aggregation's own work beyond the link (what ``T_cm``
    measured over the link model at that rate: messages handled on a fractional core, the
    CPU quota's stalls) at every rate."""

    t_cp_s: float
    t_cm_s: float
    bandwidth_Bps: float

    def __post_init__(self) -> None:
        for name in ("t_cp_s", "t_cm_s", "bandwidth_Bps"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"a calibration's {name} must be a positive number")


def _refresh_samples(s: Settings, shape: Shape) -> int:
    if shape.samples_per_device is None:
        return s.refresh_chunk
    if s.group_size == "fixed":
        return math.ceil(shape.samples_per_device / s.groups)
    return shape.samples_per_device  # anytime/predict: at most the local dataset


def _bacc_exposed(s: Settings, shape: Shape, refresh: float, chunk: float, t_cm: float) -> float:
    """What BACC's refresh adds to an iteration beside ``t_cm`` of aggregation.

    A count (``fixed`` G) is refreshed whole, so what outlasts the aggregation shows, and on
    one core or less never less than its first chunk. An ``anytime`` refresh (and
    ``predict``'s, sized from the measured rate to fill the aggregation) stops when the
    aggregation ends: its first chunk, then, while there is more to score (a local dataset
    not known is taken as larger than a chunk), T1 waits for the chunk in flight when the
    aggregation ends, half a chunk on average. On one core or less the first chunk shows whole
    (it takes the core the aggregation's own work needs; the inflation the reproduction
    measured); with ``batch_refresh`` the batch's losses are that chunk and every refresh is
    paced, so only the wait for the chunk in flight is left."""
    one_core = (shape.cores or 2.0) <= 1.0
    first = 0.0 if s.batch_refresh else min(chunk, refresh)  # what every iteration must score
    shown_first = first if one_core else max(0.0, first - t_cm)
    if s.group_size == "fixed":
        return max(max(0.0, refresh - t_cm), shown_first)
    more = shape.samples_per_device is None or refresh > first
    in_flight = chunk / 2 if more and t_cm > first else 0.0
    return shown_first + in_flight


def _quota_bound(setting: Setting, devices: Sequence[int], work: float, link: float) -> float:
    """The iteration where the slowest device runs under a CPU quota (``quota_period_s``, less
    than the reference's speed): ``work`` seconds of its own CPU at its average speed, or, where
    the wait on the link outlasts what the quota holds back, that work at the reference speed
    (its quota refilled while it waited: the convention of
    :class:`~edgetrain.runtime.predict.Device`) plus the link: ``max(work, work x speed +
    link)``. Without a quota, or at the reference's speed or more, ``work + link``."""
    slow = min((setting.devices[d] for d in devices), key=lambda dev: dev.speed)
    if slow.quota_period_s is None or slow.speed >= 1.0:
        return work + link
    return max(work, work * slow.speed + link)


def predict_mercury(s: Settings, setting: Setting, shape: Shape) -> Prediction:
    """The predicted iteration of ``s.technique`` on ``setting``."""
    if not setting.layers:
        raise ValueError("the setting has no profiled layers")
    k = len(shape.devices)
    if k < 1:
        raise ValueError("a Mercury run needs a device")
    speed = min(setting.devices[d].speed for d in shape.devices)
    # ``auto`` keys as the devices resolve them: under a CPU quota (any device's) the batch's
    # losses are the first chunk (Settings.for_device)
    s = s.for_device(any(setting.devices[d].quota_period_s is not None for d in shape.devices))
    forward = sum(u.forward_s for u in setting.layers) / speed
    t_cp = sum(u.forward_s + u.backward_s for u in setting.layers) / speed
    params = sum(u.param_bytes for u in setting.layers)
    t_cm = 0.0
    bandwidth = math.inf
    latency = 0.0

    def on_link(rate: float) -> float:  # the aggregation's link time at ``rate``
        return 2 * (k - 1) / k * params / rate + 2 * latency

    if k > 1:
        links = [setting.link(a, b) for a in shape.devices for b in shape.devices if a != b]
        bandwidth = min(link.bandwidth_Bps for link in links)
        latency = max(link.latency_s for link in links)
        t_cm = on_link(bandwidth)
    host = 0.0  # the aggregation's own work beyond the link
    cal = shape.calibration
    if cal is not None:
        t_cp = cal.t_cp_s
        if k > 1:
            host = max(0.0, cal.t_cm_s - on_link(cal.bandwidth_Bps))
            t_cm += host
    else:
        adam = ADAM_EXTRA_CPU_S_PER_BYTE if s.optimizer == "adam" else 0.0
        t_cp += setting.cpu_s(params * (adam + FLATTEN_CPU_S_PER_BYTE)) / speed
        if k > 1:
            work = 4 * (k - 1) * (params / k * WIRE_CPU_S_PER_BYTE + MESSAGE_CPU_S)
            host = setting.cpu_s(work) / speed
            t_cm += host
    per_sample = forward / max(1, shape.batch)
    scored = _refresh_samples(s, shape) if s.importance else 0  # samples a refresh scores
    refresh = scored * per_sample
    chunk = min(s.refresh_chunk, scored) * per_sample
    reshard = 0.0
    if s.resharding != "none" and shape.samples_per_device and math.isfinite(bandwidth):
        rounds = s.reshard_every or max(1, shape.samples_per_device // max(1, shape.batch))
        moved = s.reshard_fraction * shape.samples_per_device * shape.sample_bytes
        reshard = moved / rounds / bandwidth
    notes: list[str] = []
    if s.threads:
        t_is = _bacc_exposed(s, shape, refresh, chunk, t_cm)
        if t_is > 0:
            notes.append(
                f"the refresh shows {t_is * 1e3:.1f} ms beside {t_cm * 1e3:.1f} ms of aggregation"
            )
    else:
        t_is = refresh + reshard
    iteration = t_cp + t_cm + t_is
    parts = {
        "compute": t_cp,
        "communication": t_cm,
        "exposed_communication": t_cm,
        "importance": t_is,
        "overhead": t_is,
        "aggregation_overhead": host,
    }
    if cal is None and k > 1:
        link = t_cm - host  # the aggregation's time on the link, round trips included
        bound = _quota_bound(setting, shape.devices, t_cp + host + t_is, link)
        if bound < iteration:
            overlap = iteration - bound
            parts["quota_overlap"] = overlap
            parts["exposed_communication"] = t_cm - overlap
            notes.append(
                f"the slowest device's CPU quota refills while it waits on the link "
                f"({link * 1e3:.1f} ms): {overlap * 1e3:.1f} ms of an iteration overlap"
            )
            iteration = bound
    ratio = t_is / (t_cp + t_cm) if t_cp + t_cm > 0 else 0.0
    notes.insert(
        0,
        f"{s.technique}: importance sampling adds {ratio:.0%} per iteration "
        f"(Eq. 5: the speed-up is E/E_is over {1 + ratio:.2f})"
        if s.importance
        else f"{s.technique}: uniform sampling, no importance work",
    )
    if cal is not None:
        notes.append(
            f"calibrated on a uniform run at {cal.bandwidth_Bps * 8 / 1e6:.0f} Mbit/s: T_cp "
            f"{cal.t_cp_s * 1e3:.1f} ms, {host * 1e3:.1f} ms of aggregation beyond the link"
        )
    nbytes = int(2 * (k - 1) * params)  # every device's slices out and averages back
    return Prediction(s.technique, iteration, parts, nbytes, tuple(notes))
