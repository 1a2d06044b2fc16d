"""The pipeline family's cost model (its side objects' ``predict`` hook): per-stage compute with
mcPipe's replay, activation and error bytes per link, the fill and drain bubble, the window's
round-trip bound, and each stage's resident memory. Pure.

The setting's layers are the model's units in order, profiled on the reference device at the
run's microbatch (forward and backward seconds, parameter and output-activation bytes of one
microbatch). A stage's time per microbatch is its units' ``forward + backward`` divided by its
device's speed; under mcPipe's pair store each forward also replays the stage's ``m_s - 1``
pending updates, a weight gradient each: phi of a unit's compute (specification §9.2), half of
the model's first unit's, whose backward computes no input error; with low-rank replay a Linear
unit's share is scaled by ``b (in + out) / (in * out)``. A link carries the boundary
unit's activation forward and an error of the same size back per microbatch.

Each stage also spends CPU per microbatch outside its compute blocks: the schedule's loop,
its clock and heartbeats (:data:`STAGE_LOOP_CPU_S`); its messages, the activations and errors
it sends and receives (:data:`MESSAGE_CPU_S` a message and
:data:`~edgetrain.runtime.predict.WIRE_CPU_S_PER_BYTE` a byte, each side); and, where the run
sends snapshots to an evaluator, its weights every ``snapshot_every`` microbatches
(:data:`SNAPSHOT_CPU_S_PER_BYTE`). CPU seconds of one core become the reference device's
seconds by the cores the profile ran at (:meth:`~edgetrain.runtime.predict.Setting.cpu_s`).

An asynchronous pipeline (PipeDream, mcPipe, GreedyUpdates) runs no faster than its slowest
stage or link, nor than stage 0's window allows (Little's law: ``m_0`` microbatches in flight
over one microbatch's round trip through every stage and link); where these bounds are close,
a microbatch waits at busy stages and the pace is slower than all of them: the model takes
the closed cycle's mean-value analysis (:mod:`edgetrain.pipeline.cycle`, fixed service times)
and reports the wait beyond the bounds as ``queueing``. Each epoch adds the fill and drain of
the other stages. Local is one stage. Data parallelism splits every microbatch over R replicas
(compute taken to scale as 1/R) and each replica then sends its whole gradient to every other
replica, after its backward (not overlapped), and encodes and decodes each copy.

A :class:`Shape` may carry what a run measured (:mod:`edgetrain.pipeline.calibration`: the
stages' compute over the profile's, the replay over the model's, and each stage's CPU per
microbatch outside its compute blocks, which replaces the loop and message terms above); a
priori these are 1, 1 and None.

Not modelled: the optimiser step's own time beyond the profiled Local step, a CPU quota's
stops inside a compute block (the profile's sustained pace averages them), hosts sharing
physical cores, replicas sharing one link, compute that does not scale with a smaller slice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from edgetrain.pipeline import bounds, cycle, schedule
from edgetrain.pipeline.partition import Cost, Partition, partition, partition_paced
from edgetrain.pipeline.store_mode import store_mode
from edgetrain.runtime.predict import WIRE_CPU_S_PER_BYTE, Layer, Prediction, Setting

if TYPE_CHECKING:  # the unit table imports torch; the model only reads its fields
    from edgetrain.pipeline.table import UnitInfo

OBJECTIVES = ("time", "params", "memory")

# phi, the weight-gradient share of a unit's forward + backward (a Linear's backward is twice
# its forward, half of it the weight gradient)
REPLAY_SHARE = 1.0 / 3.0
# the model's first unit computes no input error: its weight gradient is half its backward + forward
FIRST_UNIT_SHARE = 1.0 / 2.0
# CPU seconds of one core a stage (or Local, or a replica) spends per microbatch outside its
# compute blocks and messages: the schedule's loop, the clock and its pause ledger, heartbeats;
# and per message it sends or receives (an activation or an error: ZeroMQ's send and receive,
# the frame checks, the Python around them), beside the bytes' own cost. Measured on this
# project's 2-core machine, process CPU less compute CPU per microbatch, in the runs of advise's
# check of 2026-12-06 (benchmarks/advise/advise-check-b45f094.json, no snapshots, evaluation at the
# end): Local 0.10-0.29 ms (10 runs, LeNet-5 and cnn2); a pipeline's first and last stages,
# two messages, 0.67-1.24 ms, its middle stages, four, 1.20-1.73 ms (GreedyUpdates and
# PipeDream, 2 and 4 stages). The mcPipe quick reproduction's 1.3-2.5 ms, the figure before,
# held its snapshots' CPU (weights sent to the evaluator), which a run without them does not
# spend. A run's own figure replaces both (calibration).
STAGE_LOOP_CPU_S = 0.2e-3
MESSAGE_CPU_S = 0.2e-3
# Seconds of CPU per byte of weights a stage (or replica) sends the evaluator in a snapshot
# (``[pipeline] snapshot_every``): each unit copied off the store, encoded and sent, and received
# and decoded by the evaluator, which shares the last host. The stage's clock leaves out its own
# time sending, not the rest, so this is fitted to what the clock shows: 2.3 ns a byte keeps the
# a priori figures of the mcPipe quick reproduction of 2026-12-05 (commit cdbb10f, a snapshot
# every 45 microbatches, 17 MB of weights a stage), whose runs had snapshots, where the loop
# constant of 1.5 ms measured on them had put them (fitted, not measured apart)
SNAPSHOT_CPU_S_PER_BYTE = 2.3e-9


@dataclass(frozen=True)
class Shape:
    """What the recipe fixes: the stage workers' (or replicas') indices in order, each stage's
    units ``[lo, hi)``, the microbatch, how the technique keeps its weights (its module's
    ``STORE``: ``latest``, ``versions``, ``pairs``, or ``auto`` for mcPipe-auto), the window
    and the microbatches per epoch."""

    workers: Sequence[int]
    bounds: Sequence[tuple[int, int]]
    microbatch: int
    store: str = "latest"
    extra: int = 0
    uniform: int | None = None
    microbatches: int | None = None
    momentum: bool = False
    replay_share: float = REPLAY_SHARE
    # each unit's input + output elements per sample (the unit table's ``pair_elems``); None:
    # from the layers' activation bytes
    pair_elems: Sequence[int] | None = None
    # calibrated on a run (a priori 1, 1, None): the stages' compute and replay over the
    # model's, and each stage's seconds per microbatch outside its compute blocks at speed 1
    # (None: the loop's and the messages' CPU, :func:`outside_a_priori`)
    compute_scale: float = 1.0
    replay_scale: float = 1.0
    outside_s: float | None = None
    # a snapshot of the weights to the evaluator every this many microbatches (0: none)
    snapshot_every: int = 0
    # per unit, its replay over the sequential replay's (``[pipeline] replay = "lowrank"``:
    # :func:`~edgetrain.pipeline.lowrank.replay_factor`); None: sequential replay
    replay_factor: Sequence[float] | None = None


@dataclass(frozen=True)
class StageCost:
    """One stage's predicted seconds per microbatch and resident bytes."""

    compute_s: float  # replay and outside included
    replay_s: float
    link_s: float  # to the next stage, both directions (0 for the last)
    latency_s: float  # one way, to the next stage
    resident_bytes: int
    m: int
    outside_s: float = 0.0


def _pair_elems(layers: Sequence[Layer], k: int, microbatch: int) -> int:
    """Per-sample input + output elements of unit ``k`` (its input is the previous output)."""
    out = layers[k].activation_bytes
    inp = layers[k - 1].activation_bytes if k > 0 else out
    return max(0, (out + inp) // (bounds.FLOAT * max(1, microbatch)))


def stage_costs(setting: Setting, shape: Shape) -> list[StageCost]:
    """Each stage's cost (a pipeline's stages, or Local's one)."""
    if len(shape.bounds) != len(shape.workers):
        raise ValueError(f"{len(shape.bounds)} stage bounds for {len(shape.workers)} workers")
    return [_stage(setting, shape, s) for s in range(len(shape.bounds))]


def _stage(setting: Setting, shape: Shape, s: int) -> StageCost:
    layers = setting.layers
    n = len(shape.bounds)
    store = shape.store
    lo, hi = shape.bounds[s]
    worker = shape.workers[s]
    speed = setting.devices[worker].speed
    m = schedule.in_flight(s, n, shape.extra, shape.uniform)
    part = layers[lo:hi]
    compute = sum(u.forward_s + u.backward_s for u in part) / speed * shape.compute_scale
    replay = 0.0
    if store in ("pairs", "auto"):
        # one weight gradient per pending update: phi of a unit's forward + backward, but half
        # of the model's first unit's, whose backward computes no input error (the
        # specification's count of multiply-accumulates, section 6.6)
        factor = shape.replay_factor
        grads = sum(
            (u.forward_s + u.backward_s)
            * (FIRST_UNIT_SHARE if k == 0 else shape.replay_share)
            * (factor[k] if factor is not None else 1.0)
            for k, u in enumerate(part, start=lo)
        )
        replay = grads / speed * (m - 1) * shape.replay_scale
    outside = 0.0
    if hi > lo:
        given = shape.outside_s
        outside = (given if given is not None else outside_a_priori(setting, shape, s)) / speed
    link_s = latency = 0.0
    if s + 1 < n:
        link = setting.link(worker, shape.workers[s + 1])
        link_s = 2 * part[-1].activation_bytes / link.bandwidth_Bps
        latency = link.latency_s
    pairs = shape.pair_elems
    sizes = [
        bounds.UnitSize(
            u.param_bytes // bounds.FLOAT,
            pairs[k] if pairs is not None else _pair_elems(layers, k, shape.microbatch),
        )
        for k, u in enumerate(part, start=lo)
    ]
    resident = bounds.resident(store, m, sizes, shape.microbatch, shape.momentum)
    return StageCost(compute + replay + outside, replay, link_s, latency, resident, m, outside)


def outside_a_priori(setting: Setting, shape: Shape, s: int) -> float:
    """Stage ``s``'s seconds per microbatch outside its compute blocks at speed 1, a priori:
    the loop's CPU and its messages' (an activation out and an error in to the next stage, an
    activation in and an error out from the previous one, one side of each)."""
    lo, hi = shape.bounds[s]
    nbytes = messages = 0
    if s + 1 < len(shape.bounds) and hi > 0:  # to the next stage: its last unit's output
        nbytes += 2 * setting.layers[hi - 1].activation_bytes
        messages += 2
    if s > 0 and lo > 0:  # from the previous stage: the output of the unit before its first
        nbytes += 2 * setting.layers[lo - 1].activation_bytes
        messages += 2
    snapshot = _snapshot_cpu_s(setting.layers[lo:hi], shape.snapshot_every)
    return setting.cpu_s(
        STAGE_LOOP_CPU_S + messages * MESSAGE_CPU_S + nbytes * WIRE_CPU_S_PER_BYTE + snapshot
    )


def _snapshot_cpu_s(units: Sequence[Layer], every: int) -> float:
    """CPU seconds per microbatch of sending ``units``' weights to the evaluator, a message a
    unit, every ``every`` microbatches (0: never)."""
    if every <= 0 or not units:
        return 0.0
    params = sum(u.param_bytes for u in units)
    return (params * SNAPSHOT_CPU_S_PER_BYTE + len(units) * MESSAGE_CPU_S) / every


def predict_pipelined(technique: str, setting: Setting, shape: Shape) -> Prediction:
    """A pipelined technique's (or Local's) time per microbatch, with its parts (``technique``
    names the prediction)."""
    if not setting.layers:
        raise ValueError("the setting has no profiled layers")
    stages = stage_costs(setting, shape)
    compute = max(st.compute_s for st in stages)
    link = max(st.link_s for st in stages)
    round_trip = sum(st.compute_s + st.link_s + 2 * st.latency_s for st in stages)
    window = round_trip / stages[0].m
    bound = max(compute, link, window)
    period = max(bound, cycle.period(_stations(stages), stages[0].m))
    # fill and drain: one microbatch crosses every stage and link once beyond the steady pace
    fill = max(0.0, round_trip - period)
    bubble = fill / shape.microbatches if shape.microbatches else 0.0  # None: steady state
    slowest = max(range(len(stages)), key=lambda s: stages[s].compute_s)
    parts = {
        "compute": compute,
        "replay": stages[slowest].replay_s,
        "communication": link,
        "exposed_communication": max(0.0, max(link, window) - compute),
        "queueing": period - bound,
        "bubble": bubble,
        "overhead": stages[slowest].outside_s,
    }
    iteration = period + bubble
    nbytes = int(sum(2 * setting.layers[hi - 1].activation_bytes for _, hi in shape.bounds[:-1]))
    notes = [_pace_note(technique, stages, slowest, compute, link, window)]
    if period > bound * 1.05:
        notes.append(
            f"stages near balance: a microbatch waits at busy stages, {(period - bound) * 1e3:.1f}"
            f" ms per microbatch beyond the slowest bound ({bound * 1e3:.1f} ms)"
        )
    notes.append(f"{shape.microbatch / iteration:,.0f} samples/s predicted")
    memory = {shape.workers[s]: st.resident_bytes for s, st in enumerate(stages)}
    return Prediction(technique, iteration, parts, nbytes, tuple(notes), memory)


def _stations(stages: Sequence[StageCost]) -> list[cycle.Station]:
    """The cycle a microbatch in stage 0's window goes round: each stage (its whole work), each
    link (both directions) and the link's latency there and back."""
    out = []
    for st in stages:
        out.append(cycle.Station(st.compute_s))
        if st.link_s:
            out.append(cycle.Station(st.link_s))
        if st.latency_s:
            out.append(cycle.Station(2 * st.latency_s, queue=False))
    return out


def _pace_note(
    technique: str,
    stages: Sequence[StageCost],
    slowest: int,
    compute: float,
    link: float,
    window: float,
) -> str:
    if len(stages) == 1:
        return f"{technique}: one stage computes every unit"
    if window >= max(compute, link):
        return (
            f"stage 0's window of {stages[0].m} cannot cover a microbatch's round trip "
            f"({window * stages[0].m * 1e3:.1f} ms): latency sets the pace"
        )
    if link > compute:
        return (
            f"a link sets the pace: {link * 1e3:.1f} ms per microbatch against "
            f"{compute * 1e3:.1f} ms of compute"
        )
    replay = stages[slowest].replay_s
    text = f"stage {slowest} sets the pace ({compute * 1e3:.1f} ms per microbatch"
    return text + (f", {replay * 1e3:.1f} ms of it replay)" if replay else ")")


def predict_dataparallel(technique: str, setting: Setting, shape: Shape) -> Prediction:
    """Data parallelism over ``shape.workers`` (replicas) per microbatch."""
    if not setting.layers:
        raise ValueError("the setting has no profiled layers")
    replicas = list(shape.workers)
    r = len(replicas)
    speed = min(setting.devices[w].speed for w in replicas)
    params = sum(u.param_bytes for u in setting.layers)
    outside = shape.outside_s
    if outside is None:
        # the loop, and each copy of the gradient sent to and received from every other replica
        wire = 2 * (r - 1) * (params * WIRE_CPU_S_PER_BYTE + MESSAGE_CPU_S)
        snapshot = _snapshot_cpu_s(setting.layers, shape.snapshot_every)
        outside = setting.cpu_s(STAGE_LOOP_CPU_S + wire + snapshot)
    compute = sum(u.forward_s + u.backward_s for u in setting.layers) / speed / r
    compute = compute * shape.compute_scale + outside / speed
    comm = 0.0
    if r > 1:
        links = [setting.link(a, b) for a in replicas for b in replicas if a != b]
        bandwidth = min(link.bandwidth_Bps for link in links)
        latency = max(link.latency_s for link in links)
        comm = (r - 1) * params / bandwidth + latency
    parts = {
        "compute": compute,
        "communication": comm,
        "exposed_communication": comm,
        "bubble": 0.0,
        "overhead": outside / speed,
    }
    iteration = compute + comm
    sizes = [
        bounds.UnitSize(u.param_bytes // bounds.FLOAT, _pair_elems(setting.layers, k, 1))
        for k, u in enumerate(setting.layers)
    ]
    resident = bounds.resident("latest", 1, sizes, shape.microbatch, shape.momentum)
    note = (
        f"each replica sends {params * (r - 1) / 1e6:.1f} MB per microbatch: "
        + ("communication dominates" if comm > compute else "compute dominates")
        + f" ({comm * 1e3:.1f} ms against {compute * 1e3:.1f} ms)"
    )
    return Prediction(
        technique,
        iteration,
        parts,
        int(params * (r - 1) * r),
        (note, f"{shape.microbatch / iteration:,.0f} samples/s predicted"),
        {w: resident for w in replicas},
    )


def min_max_bounds(setting: Setting, shape: Shape) -> list[tuple[int, int]]:
    """The stages' units the plan would choose for ``shape.workers`` under this model's stage
    time (:func:`choose`, objective ``time``; device memory is not checked here)."""
    return list(choose(setting, shape, "time", caps=False).bounds)


def store_of(technique: str, store: str = "mixed") -> str:
    """How ``technique``'s stages keep their weights (:class:`Shape`'s ``store``): its module's
    ``STORE``, or ``auto`` for mcPipe with ``[pipeline] store = "auto"``."""
    mode = store_mode(technique)
    return "auto" if mode == "pairs" and store == "auto" else mode


def unit_layers(
    infos: Sequence[UnitInfo],
    microbatch: int,
    times: Sequence[tuple[float, float]] | None = None,
) -> tuple[Layer, ...]:
    """The unit table as the model's layers at ``microbatch`` samples: each unit's forward and
    backward seconds from ``times`` (a profile's, at the microbatch), else multiply-accumulates
    standing for time (forward ``b x MACs``, backward twice that, once for the first unit,
    which computes no input error: relative, not seconds); its
    parameter bytes and the output activation of one microbatch."""
    if times is not None and len(times) != len(infos):
        raise ValueError(f"{len(times)} unit times for {len(infos)} units")
    out = []
    for k, u in enumerate(infos):
        # the model's first unit computes no input error: its backward is its weight gradient
        grads = 1.0 if k == 0 else 2.0
        fwd, bwd = (
            times[k] if times is not None else (microbatch * u.macs, grads * microbatch * u.macs)
        )
        act = microbatch * u.out_elems * bounds.FLOAT
        out.append(Layer(u.name, float(fwd), float(bwd), u.param_bytes, act))
    return tuple(out)


@dataclass(frozen=True)
class StageMemory:
    """A stage's memory from the unit table: resident weights (+ pairs, + optimiser state),
    the largest transient, the saved activations of its ``m`` microbatches; its parameters."""

    resident: int
    transient: int
    activations: int
    params: int

    @property
    def memory(self) -> int:
        return self.resident + self.transient + self.activations


def stage_memory(infos: Sequence[UnitInfo], shape: Shape, s: int) -> StageMemory:
    """Stage ``s``'s memory (:mod:`.bounds`'s formulas on the unit table's sizes)."""
    lo, hi = shape.bounds[s]
    part = infos[lo:hi]
    m = schedule.in_flight(s, len(shape.bounds), shape.extra, shape.uniform)
    sizes = [bounds.UnitSize(u.params, u.pair_elems) for u in part]
    res = bounds.resident(shape.store, m, sizes, shape.microbatch, shape.momentum)
    linear = all(leaf.kind == "Linear" for u in part for leaf in u.leaves)
    fused = linear and not shape.momentum
    trans = bounds.transient(shape.store, sizes, shape.momentum, fused=fused)
    acts = m * shape.microbatch * bounds.FLOAT * sum(u.in_elems + u.pair_elems for u in part)
    return StageMemory(res, trans, acts, sum(u.params for u in part))


def _alone(shape: Shape, s: int, lo: int, hi: int) -> Shape:
    """``shape`` with only stage ``s``'s units set (the others empty): one candidate stage."""
    cut = [(0, 0)] * len(shape.workers)
    cut[s] = (lo, hi)
    return replace(shape, bounds=cut)


def cost_function(
    setting: Setting,
    shape: Shape,
    objective: str,
    infos: Sequence[UnitInfo] | None = None,
    *,
    links: bool = True,
    caps: bool = True,
) -> Cost:
    """``cost(i, k, s)`` of units ``[i, k)`` on stage ``s`` for the partitioner: ``time``, the
    stage's compute with replay or its link to the next stage if slower (``links`` False: the
    layers' times are not seconds, so no link is compared); ``params``, its parameters;
    ``memory``, its memory over its device's. With ``caps``, a stage over its device's memory
    (:func:`stage_memory` with the unit table ``infos``, else its resident bytes) costs inf."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}")
    units = len(setting.layers)

    def cost(i: int, k: int, s: int) -> float:
        one = _alone(shape, s, i, k)
        st = _stage(setting, one, s)
        need = stage_memory(infos, one, s).memory if infos is not None else st.resident_bytes
        cap = setting.devices[shape.workers[s]].memory_bytes if caps else None
        if cap is not None and need > cap:
            return math.inf
        if objective == "time":
            return max(st.compute_s, st.link_s if links and k < units else 0.0)
        if objective == "params":
            return float(sum(u.param_bytes // bounds.FLOAT for u in setting.layers[i:k]))
        return need / cap if cap else float(need)

    return cost


def choose(
    setting: Setting,
    shape: Shape,
    objective: str,
    infos: Sequence[UnitInfo] | None = None,
    *,
    links: bool = True,
    caps: bool = True,
) -> Partition:
    """The stages' units under ``objective`` (:func:`cost_function`) by the exact min-max
    partitioner; under ``time``, when stage 0's window sets the pace (a microbatch's round
    trip over ``m_0`` is longer than the slowest stage), the cuts with the shortest predicted
    period instead (:func:`~edgetrain.pipeline.partition.partition_paced`). Raises
    :class:`~edgetrain.pipeline.partition.PartitionError` when no cut fits."""
    cost = cost_function(setting, shape, objective, infos, links=links, caps=caps)
    n, units = len(shape.workers), len(setting.layers)
    if objective != "time" or n == 1:
        return partition(units, n, cost)

    def trip(i: int, k: int, s: int) -> float:
        st = _stage(setting, _alone(shape, s, i, k), s)
        return st.compute_s + (st.link_s + 2 * st.latency_s if links else 0.0)

    window = schedule.in_flight(0, n, shape.extra, shape.uniform)
    return partition_paced(units, n, cost, trip, window)
