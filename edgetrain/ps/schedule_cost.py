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
them and the server): each pulls and pushes at its even share (:func:`shared_Bps`). Not
modelled: the shards' own apply time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgetrain.plan.costs import LayerCosts
from edgetrain.plan.simulator import simulate
from edgetrain.plan.strategies import SCHEDULES, verdict
from edgetrain.ps.latency import with_round_trip
from edgetrain.runtime.predict import Prediction, Setting

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
    iteration = timeline.iteration_s
    parts = {
        "compute": compute,
        "communication": communication,
        "exposed_communication": max(0.0, iteration - compute),
        "overhead": 0.0,
    }
    nbytes = int(2 * sum(layer.param_bytes for layer in setting.layers)) * len(trainers)
    notes = (
        f"{technique}: {len(forward) + 1} pull(s) and {len(backward) + 1} push(es) per iteration",
        str(verdict(costs)["text"]),
    )
    return Prediction(technique, iteration, parts, nbytes, notes)
