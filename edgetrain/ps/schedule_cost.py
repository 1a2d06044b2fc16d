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
Not modelled: trainers sharing one server's link (each trainer's transfers are taken to have
the link to itself) and the shards' own apply time.
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
    bandwidth = min(link.bandwidth_Bps for link in links)
    latency = max(link.latency_s for link in links)
    params = np.array([layer.param_bytes for layer in setting.layers], dtype=np.float64)
    costs = LayerCosts(
        pt=params / bandwidth,
        fc=np.array([layer.forward_s for layer in setting.layers]) / speed,
        bc=np.array([layer.backward_s for layer in setting.layers]) / speed,
        gt=params / bandwidth,
        dt=TRANSMISSION_OVERHEAD_S,
        names=tuple(layer.name for layer in setting.layers),
    )
    return with_round_trip(costs, 2.0 * latency, 2.0 * latency)


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
