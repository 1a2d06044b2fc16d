"""The gossip family's cost model, its shared pieces: the CPU constants, each worker's compute
and the wire. The techniques' models, each answering its ``predict`` hook with a
:class:`~edgetrain.runtime.predict.Prediction`: GoSGD and EdgeGossip in :mod:`.cost_gosgd`,
DLion, Gaia and Ako in :mod:`edgetrain.gossip.exchange.cost_model`. docs/gossip.md ("Cost
model") says what is modelled and what is not. Pure.

- **Compute.** The setting's layers are profiled on the reference device for one minibatch of
  the recipe's batch size b; a worker's step at batch m takes ``sum(forward + backward) x m /
  b`` divided by its device's speed (linear in the batch: a step's fixed part is not modelled).
- **The technique's own CPU work** (snapshots, sums, top-k, the significance filter, the
  transport's copies, the optimiser's step) is counted per byte of a float32 vector or per
  entry with :class:`Constants`: CPU seconds of one core, as seconds of the reference device
  (:func:`on_reference`: over the cores the profile ran at, where that was a CPU quota's share
  of one, as ``Setting.cpu_s`` turns them) divided by the worker's speed; the exchange loop
  adds fixed work per message and per iteration. It shares the worker's CPU with compute (on
  a CPU-quota'd host the transport's thread does).
  Under a CPU quota (the setting's ``Device.quota_period_s``, which ``setting_from_testbed``
  sets for a worker with less than a core of an emulated host, else
  ``Constants.quota_period_s``) a stretch of work between waits runs at the reference speed
  while the quota lasts (:func:`wall_s`); the average stays ``speed``.
- **The wire.** A message of B bytes over a link of rate R takes B / R plus the link's
  latency (one way). With ``shared_interface`` (the default: the emulator shapes each host's
  own link) a worker's messages leave one after another through one interface and arrive
  through one, so its egress (ingress) time is the sum over its messages; otherwise every
  link is its own.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace

from edgetrain.runtime.predict import WIRE_CPU_S_PER_BYTE, Setting

FLOAT = 4  # bytes of a float32 entry: parameters travel and are summed as float32


@dataclass(frozen=True)
class Constants:
    """CPU seconds of the techniques' own work on the reference device (speed 1), per byte of
    a float32 vector or per entry, divided by a worker's speed where it runs.

    The defaults were measured on this project's 2-core machine (one torch thread, 4M-entry
    vectors, out of cache: the conservative figure; at 422k entries, in cache, the per-byte ones
    are 1.5-4x smaller); ``wire_s_per_byte`` is half the inverse of edgetrain's loopback
    throughput between two processes at 16 MiB (0.704 GB/s, benchmarks/transport). Give
    measured ones for another reference device."""

    add_s_per_byte: float = 33e-12  # v += u (a sum, a residual, a merge)
    copy_s_per_byte: float = 36e-12  # a copy (a snapshot, the flat gradient, a check)
    take_s_per_byte: float = 181e-12  # a dense take: the float32 copy and its rounding residual
    step_s_per_byte: float = 93e-12  # the optimiser's step (SGD with momentum)
    wire_s_per_byte: float = WIRE_CPU_S_PER_BYTE  # one side of a message: send or receive
    select_s_per_entry: float = 5.0e-9  # top-k (sparse.top_k's partition): per entry
    select_s_per_chosen: float = 19e-9  # ... and per entry chosen (with its gather)
    significance_s_per_entry: float = 6.05e-9  # Gaia's filter (|step acc| > v |w|, nonzero)
    scatter_s_per_entry: float = 1.7e-9  # one sparse entry added into a dense vector
    # Fixed work the per-byte figures miss, measured inside the exchange loop's workers (CPU
    # time of the main thread per call). First on a 4-worker DLion of LeNet-5 at b0 = 64 on
    # digits, on dlion-compute-4 and as local processes: the update's per-tensor work (the
    # gradient split into the parameters, the optimiser's loop over them), about 90 us a layer
    # with parameters (LeNet-5's five: 0.45 ms). Then from the CPU-per-part tables of DLion's
    # runs on edgegossip-4 (LeNet-5, 245 KB messages, three peers, dense; advise's checks of
    # 2026-12-07, seeds 4 and 7, workers 0 and 1; each part less what the figures above give
    # it): taking in one message besides its bytes (the header, the payload's checks, the
    # acknowledgement, the bookkeeping), 1.85-2.0 ms for three, 0.45 ms a message (0.15 when
    # first measured); DLion's encoding of a link's message beside its bytes (the dense
    # take's or a top-k's call: 1.2-1.5 ms for three against 0.16 counted); a message's send
    # on the main thread (0.77-0.82 ms for three against 0.52); the transport thread's work
    # per message out or in (1.35-1.41 ms for six, none counted before); and, once an
    # iteration, the loop's own (the step's bookkeeping, 0.4 ms; the wait's polling, 0.5; the
    # update beyond its per-layer figure, 0.3). The transport thread's and the loop's own were
    # then measured apart, on runs made for it (seed 100, not a check's: Gaia, DLion and Ako,
    # LeNet-5 at 32, four workers, on mercury-4u and edgegossip-4, 2026-12-07): the transport
    # thread took 0.43-0.52 ms an iteration for Gaia's 46 KB out and in, 0.9-1.16 for DLion's
    # 395-708 KB and 1.09-1.19 for Ako's 741 KB on 1 Gbit/s links: 0.072 ms a message and 0.48
    # ns a byte out or in (the 0.23 ms a message above was DLion's dense 245 KB). The loop's
    # own (step, sampling, wait, the update beyond its figure) took 0.7-0.9 ms on 1 Gbit/s
    # links. Not modelled: on a saturated 100 Mbit/s link the transport thread takes more (DLion
    # 1.3-2.0 ms for 147 KB; Ako 12.6-13.2 ms for 741 KB, its link busy 59 ms an iteration).
    receive_s_per_message: float = 450e-6
    update_s_per_layer: float = 90e-6
    encode_s_per_message: float = 0.40e-3
    send_s_per_message: float = 0.09e-3
    transport_s_per_message: float = 0.072e-3
    transport_s_per_byte: float = 0.48e-9
    loop_s_per_iteration: float = 0.8e-3
    shared_interface: bool = True  # a worker's messages share its one interface
    # A device slower than the reference is a CPU quota of ``speed`` reference cores enforced
    # every quota_period_s (a cgroup's cfs period, as the emulator sets it: 0.1 s): it runs at
    # the reference speed while its quota lasts and at ``speed`` on average. None: uniformly
    # slow (a slower core).
    quota_period_s: float | None = None


DEFAULT = Constants()


def on_reference(constants: Constants, setting: Setting) -> Constants:
    """``constants`` (CPU seconds of one core) as seconds of ``setting``'s reference device:
    where the profile ran at a CPU quota's share of a core (``Setting.reference_cores``, as
    inside an emulated host), a second of CPU takes ``1 / cores`` of its seconds. Unchanged
    on a whole core."""
    scale = setting.cpu_s(1.0)
    if scale == 1.0:
        return constants
    return replace(
        constants,
        **{
            f.name: getattr(constants, f.name) * scale
            for f in fields(constants)
            if "_s_per_" in f.name
        },
    )


# ---------------------------------------------------------------------- shared pieces


def check_setting(setting: Setting, workers: Sequence[int]) -> None:
    """ValueError unless the setting has layers and a device for every worker."""
    if not setting.layers:
        raise ValueError("the setting has no profiled layers")
    if step_work_s(setting, 1, 1) <= 0:
        raise ValueError("the setting's layers take no time: give their profiled seconds")
    if not workers:
        raise ValueError("a gossip run needs at least one trainer")
    if max(workers) >= len(setting.devices):
        raise ValueError(
            f"the setting names {len(setting.devices)} devices for workers up to "
            f"{max(workers)}: give one device per worker, in worker order"
        )


def step_compute_s(setting: Setting, worker: int, batch: float, profiled_batch: int) -> float:
    """Forward and backward of a minibatch of ``batch`` on ``worker``'s device, on average."""
    return step_work_s(setting, batch, profiled_batch) / setting.devices[worker].speed


def step_work_s(setting: Setting, batch: float, profiled_batch: int) -> float:
    """Forward and backward of a minibatch of ``batch`` on the reference device."""
    per = sum(layer.forward_s + layer.backward_s for layer in setting.layers)
    return per * batch / profiled_batch


def wall_s(setting: Setting, worker: int, work: float, constants: Constants) -> float:
    """Seconds ``work`` reference seconds of CPU take on ``worker`` in one stretch: ``work /
    speed``, or under a CPU quota (the device's ``quota_period_s``, else the constants') the
    reference speed until the quota runs out, then a stall to the next period, and so on (the
    quota full at the start: the worker waited before)."""
    device = setting.devices[worker]
    speed = device.speed
    period = device.quota_period_s
    if period is None:
        period = constants.quota_period_s
    if period is None or speed >= 1.0 or work <= 0:
        return work / speed
    quota = speed * period
    stalls = max(0, math.ceil(work / quota) - 1)
    return stalls * period + (work - stalls * quota)


def forward_per_sample_s(setting: Setting, worker: int, profiled_batch: int) -> float:
    """The forward pass of one sample on ``worker``'s device (a ranking's cost)."""
    per = sum(layer.forward_s for layer in setting.layers)
    return per / profiled_batch / setting.devices[worker].speed


def model_bytes(setting: Setting) -> int:
    """The model's parameter bytes (float32: 4 an entry)."""
    return sum(layer.param_bytes for layer in setting.layers)


def param_layers(setting: Setting) -> int:
    """The setting's layers with parameters (the optimiser steps each one's tensors)."""
    return sum(1 for layer in setting.layers if layer.param_bytes > 0)


def model_entries(setting: Setting) -> int:
    return max(1, model_bytes(setting) // FLOAT)


@dataclass(frozen=True)
class Transfer:
    """``nbytes`` from worker ``src`` to worker ``dst`` (an average where it varies)."""

    src: int
    dst: int
    nbytes: float


@dataclass(frozen=True)
class WireTimes:
    """Each worker's interface busy time per iteration: out and in."""

    egress: Mapping[int, float]
    ingress: Mapping[int, float]

    @property
    def busiest(self) -> float:
        return max([*self.egress.values(), *self.ingress.values(), 0.0])


def wire_times(setting: Setting, transfers: Sequence[Transfer], shared: bool) -> WireTimes:
    """Seconds each worker's interface spends on ``transfers`` (see the module's docstring)."""
    egress: defaultdict[int, float] = defaultdict(float)
    ingress: defaultdict[int, float] = defaultdict(float)
    for t in transfers:
        s = t.nbytes / setting.link(t.src, t.dst).bandwidth_Bps
        if shared:
            egress[t.src] += s
            ingress[t.dst] += s
        else:
            egress[t.src] = max(egress[t.src], s)
            ingress[t.dst] = max(ingress[t.dst], s)
    return WireTimes(dict(egress), dict(ingress))


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def speed_label(setting: Setting, worker: int) -> str:
    return f"worker {worker} (speed {setting.devices[worker].speed:.2f})"
