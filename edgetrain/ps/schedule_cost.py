"""The scheduled parameter-server techniques' cost model: a setting's layers and links as the
planner's per-layer costs, the technique's cuts on them, and the simulated iteration with its
parts (ALGORITHMS.md §1). Pure.

Each layer's forward and backward seconds are the profiled ones divided by the slowest
trainer's speed (every trainer waits at the epoch barrier for the slowest); a layer's pull and
push take its parameter bytes over the slowest trainer-server link. A trainer pipelines its
requests (:mod:`edgetrain.ps.transmitter`): the transmissions of an iteration pay one round
trip (``2 x latency``) per direction, on the first layer's pull and on its push
(:func:`~edgetrain.ps.latency.with_round_trip`), and each pays ``dt`` =
:data:`TRANSMISSION_OVERHEAD_S`, the per-message work of Python and ZeroMQ on both ends.
Trainers share the links their transfers cross at once (a server's own link, a WAN between
them and the server): each pulls and pushes at its even share (:func:`shared_Bps`).

The timeline puts the transmissions on the link, beside the compute. But their CPU is spent
on the trainer's and the shards' cores, which the compute needs too: each transmission is a
request and its answer at both ends, from and to every shard (``2 x servers`` messages a
trainer, ``2 x trainers`` a shard, at :data:`~edgetrain.runtime.predict.MESSAGE_CPU_S` each),
and the bytes of the pulls and pushes at
:data:`~edgetrain.runtime.predict.WIRE_CPU_S_PER_BYTE` a side. The slowest trainer's compute
and messages (``overhead``), and the busiest shard's messages and bytes (``server_cpu``), are
each a floor of the iteration (:func:`cpu_floors`): on fractional cores, a 0.19-core trainer
of LeNet-5 spends as long on its 16 messages as on its compute. Not modelled: the shards'
apply time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgetrain.plan.costs import LayerCosts
from edgetrain.plan.simulator import simulate
from edgetrain.plan.strategies import SCHEDULES, verdict
from edgetrain.ps.latency import with_round_trip
from edgetrain.runtime.predict import MESSAGE_CPU_S, WIRE_CPU_S_PER_BYTE, Prediction, Setting

# Seconds of work per transmission on top of its bytes (a request and its answer through Python
# and ZeroMQ). Pipelined single-layer pulls of lenet5 over loopback measured 0.03 ms apiece on
# a busy two-core machine; 0.1 ms allows for larger messages' framing and a slower host.
TRANSMISSION_OVERHEAD_S = 1e-4


def layer_costs(setting: Setting, trainers: Sequence[int], servers: Sequence[int]) -> LayerCosts:
    """The planner's costs of ``setting`` for these trainers and servers (worker indices)."""
    if not setting.layers:
        raise ValueError("the setting has no profiled layers")
    if not trainers or not servers:
        raise ValueError("a parameter-server run needs a trainer and a server")
    speed = min(setting.devices[t].speed for t in trainers)
    links = [setting.link(t, s) for t in trainers for s in servers]
    latency = max(link.latency_s for link in links)
    pull, push = shared_Bps(setting, trainers, servers)
    params = np.array([layer.param_bytes for layer in setting.layers], dtype=np.float64)
    costs = LayerCosts(
        pt=params / pull,
        fc=np.array([layer.forward_s for layer in setting.layers]) / speed,
        bc=np.array([layer.backward_s for layer in setting.layers]) / speed,
        gt=params / push,
        dt=TRANSMISSION_OVERHEAD_S,
        names=tuple(layer.name for layer in setting.layers),
    )
    return with_round_trip(costs, 2.0 * latency, 2.0 * latency)


def shared_Bps(
    setting: Setting, trainers: Sequence[int], servers: Sequence[int]
) -> tuple[float, float]:
    """The rate at which the slowest trainer pulls, and pushes, the whole model when every
    trainer does so at once (after the barrier): each server sends its shard to every trainer
    (and receives every trainer's), so a server's link, or a WAN between the trainers and the
    servers, is shared by every trainer's transfer (:meth:`Setting.concurrent_Bps`); the model
    comes in ``len(servers)`` shards in parallel, so never faster than its slowest transfer
    times the shards, nor than the slowest trainer-server link alone."""
    pairs = [(s, t) for t in trainers for s in servers]
    alone = min(setting.link(t, s).bandwidth_Bps for s, t in pairs)
    pull = min(setting.concurrent_Bps(pairs))
    push = min(setting.concurrent_Bps([(t, s) for s, t in pairs]))
    n = len(servers)
    return min(alone, n * pull), min(alone, n * push)


def cpu_floors(
    setting: Setting, trainers: Sequence[int], servers: Sequence[int], transmissions: int
) -> tuple[float, float]:
    """The seconds an iteration's transmissions take of the CPU: the slowest trainer's (its
    messages to and from every shard, and its pulled and pushed bytes) and the slowest shard's
    (every trainer's messages, and its share of their bytes), each over its device's speed."""
    model = sum(layer.param_bytes for layer in setting.layers)
    k, n = len(trainers), len(servers)
    trainer_work = 2 * transmissions * n * MESSAGE_CPU_S + 2 * model * WIRE_CPU_S_PER_BYTE
    server_work = k * (2 * transmissions * MESSAGE_CPU_S + 2 * model / n * WIRE_CPU_S_PER_BYTE)
    trainer_speed = min(setting.devices[t].speed for t in trainers)
    server_speed = min(setting.devices[s].speed for s in servers)
    return (
        setting.cpu_s(trainer_work) / trainer_speed,
        setting.cpu_s(server_work) / server_speed,
    )


def predict_schedule(
    technique: str, setting: Setting, trainers: Sequence[int], servers: Sequence[int]
) -> Prediction:
    """The predicted iteration of ``technique`` (one of ``SCHEDULES``) on ``setting``.

    A cost-aware schedule (iBatch, DynaComm) is planned on these costs, as it would be once it
    has measured them; a fixed one (sequential, layer by layer) cuts as it always does."""
    costs = layer_costs(setting, trainers, servers)
    forward, backward = SCHEDULES[technique].cutter(costs)
    timeline = simulate(costs, forward, backward)
    compute = float(costs.fc.sum() + costs.bc.sum())
    transmissions = len(forward) + 1 + len(backward) + 1
    # (pt and gt hold the two round trips: one per direction, however many transmissions)
    communication = float(costs.pt.sum() + costs.gt.sum()) + transmissions * costs.dt
    overhead, server_cpu = cpu_floors(setting, trainers, servers, transmissions)
    floor = max(compute + overhead, server_cpu)
    iteration = max(timeline.iteration_s, floor)
    # what the trainer waits beyond its own CPU: the timeline's, or the shard's floor
    waited = iteration - compute - (overhead if floor > timeline.iteration_s else 0.0)
    parts = {
        "compute": compute,
        "communication": communication,
        "exposed_communication": max(0.0, waited),
        "overhead": overhead,
        "server_cpu": server_cpu,
    }
    nbytes = int(2 * sum(layer.param_bytes for layer in setting.layers)) * len(trainers)
    notes = [
        f"{technique}: {len(forward) + 1} pull(s) and {len(backward) + 1} push(es) per iteration",
        str(verdict(costs)["text"]),
    ]
    if floor > timeline.iteration_s:
        which = "the slowest shard's" if server_cpu >= compute + overhead else "the trainer's"
        notes.append(
            f"{which} CPU sets the pace: {overhead * 1e3:.1f} ms of the trainer's messages "
            f"beside {compute * 1e3:.1f} ms of compute, {server_cpu * 1e3:.1f} ms at the shard"
        )
    return Prediction(technique, iteration, parts, nbytes, tuple(notes))
