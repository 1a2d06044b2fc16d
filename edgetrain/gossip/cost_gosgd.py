"""GoSGD's and EdgeGossip's cost model (their ``predict`` hooks; the shared pieces in
:mod:`.cost_model`). Pure.

GoSGD: every step, a worker takes in (decodes, checks, merges) the pushes that came, trains,
steps its optimiser and with probability p snapshots its weights and pushes them to a random
peer without waiting (the transport's thread sends while it trains: the wire is overlapped). A
link slower than the pushes skips them (a full outbox): the share ``carried`` of a worker's
pushes goes, and its peers merge less. Every worker takes as many steps per epoch as its shard
has minibatches; with ``sync_epochs`` the epoch barrier makes the slowest set the pace, and
without it the run still ends with the slowest, so the iteration is the slowest worker's step.

EdgeGossip: GoSGD whose workers train on a share r_i of their shard per epoch, after ranking
their aggregated points (a forward pass over 1/ratio of the shard; every sample with ``order =
"oracle"``, none with ``"random"``): the balancer (Algorithm 1, :mod:`edgetrain.plan.balancer`)
gives r_i = T_(1) / T_i (at least ``r_min``) with T_i the predicted time of a full local epoch,
ranking included. Worker i's epoch is then ``T_(1) + (1 - r_i) x ranking_i``: it ranks its
whole shard whatever it keeps. The predictor is not exact: each worker the balancer cuts (r_i <
1) ends its epoch off by a relative error of spread ``balance_error``, and the barrier waits
for the last, though none past its whole shard (:func:`expected_overrun`). The default, 0.18,
is the standard deviation of a normal error whose mean absolute value is the in-run predictor
error measured in ``benchmarks/edgegossip-rank`` (14.7%, MNIST, five seeds); without it the
model put EdgeGossip's epoch 20% under the EdgeGossip reproduction's one-seed runs. The iteration is
reported per step of a full equal shard (GoSGD's: the epoch over N / (k b)), so the two compare
directly.
The one-off aggregation before training is not in it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from edgetrain.gossip.config import EdgeGossipSection, GossipSection
from edgetrain.gossip.cost_model import (
    DEFAULT,
    Constants,
    check_setting,
    forward_per_sample_s,
    model_bytes,
    ms,
    on_reference,
    speed_label,
    step_compute_s,
)
from edgetrain.gossip.edgegossip import ranking
from edgetrain.recipe import Recipe
from edgetrain.runtime.predict import Prediction, Setting

SETTLE_ROUNDS = 12  # fixed-point rounds (pushes carried, merges received, shares)
BALANCE_ERROR = 0.18  # sd of the predictor's relative error (mean |error| 14.7%: see above)
_GRID = 1000  # expected_overrun's integration steps


def expected_overrun(workers: Sequence[tuple[float, float]], sd: float) -> float:
    """How much later than the planned epoch (as a share of it) the barrier comes on average,
    for workers whose shares were planned from predictions off by ``sd`` x Z_i (Z_i
    independent standard normals): worker i, given as (planned, whole) in planned epochs,
    ends at ``min(whole, planned x (1 + sd Z_i))``, never after its whole shard. The planned
    epoch (1) is the floor: the workers that were not cut end there. The integral over u >= 0
    of 1 - P(every worker ends by 1 + u), by the midpoint rule; 0 for none or sd 0."""
    top = max((whole - 1.0 for _, whole in workers), default=0.0)
    if sd <= 0 or top <= 0:
        return 0.0
    step = top / _GRID
    total = 0.0
    for i in range(_GRID):
        u = (i + 0.5) * step
        done = 1.0
        for planned, whole in workers:
            if whole > 1.0 + u and planned > 0:
                z = ((1.0 + u) / planned - 1.0) / sd
                done *= 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
        total += 1.0 - done
    return total * step


@dataclass(frozen=True)
class GossipShape:
    """What the recipe fixes for GoSGD: the trainers, the batch (the profiled one), p,
    whether epochs end at a barrier, and each worker's share of the training set (None:
    equal shards)."""

    workers: Sequence[int]
    batch: int
    probability: float
    sync_epochs: bool = True
    fractions: Sequence[float] | None = None


@dataclass(frozen=True)
class EdgeShape:
    """EdgeGossip's knobs that change its time (``[edgegossip]``)."""

    balance: str = "predictive"  # predictive, reactive, static (balanced), off (r = 1)
    order: str = "shuffled"  # shuffled, aggregated (rank 1/ratio), oracle (all), random (none)
    ratio: int = 10
    r_min: float = 0.0
    rank_every: int = 3  # epochs per ranking (its cost spread over them), as [edgegossip]
    rank_sample: float = 2.0  # points ranked: min(1, rank_sample x r_i) of them (0: all)
    balance_error: float = BALANCE_ERROR  # the balancer's relative error per cut worker (sd)

    def ranked_share(self, ratio: float) -> float:
        """The share of the points a ranking at kept share ``ratio`` ranks, as the runner
        counts them (:func:`~edgetrain.gossip.edgegossip.ranking.ranked_share`)."""
        shuffled = self.order in ranking.SHUFFLED_ORDERS
        return ranking.ranked_share(ratio, self.rank_sample, shuffled)


@dataclass(frozen=True)
class GossipWorker:
    """One worker's predicted step and epoch (an epoch per sample of the training set)."""

    worker: int
    compute_s: float  # one step's forward and backward
    push_s: float  # per step: snapshots and sends (p x carried of them)
    merge_s: float  # per step: the pushes taken in
    update_s: float  # per step: the optimiser's step
    carried: float  # share of its pushes the link carries
    received: float  # pushes merged per own step
    ratio: float  # r_i (1 for GoSGD)
    steps: float  # steps per epoch per training sample: f_i r_i / b
    rank_s: float  # ranking per epoch per training sample
    push_wire_s: float  # one push's time on the wire, on average over its peers

    @property
    def step_s(self) -> float:
        return self.compute_s + self.push_s + self.merge_s + self.update_s

    @property
    def epoch_s(self) -> float:
        """The epoch's seconds per training sample (times N: the epoch)."""
        return self.steps * self.step_s + self.rank_s


def gossip_workers(
    setting: Setting,
    shape: GossipShape,
    edge: EdgeShape | None = None,
    constants: Constants = DEFAULT,
) -> list[GossipWorker]:
    """Every worker's predicted step and epoch under GoSGD (``edge`` None) or EdgeGossip."""
    ws = list(shape.workers)
    check_setting(setting, ws)
    k = len(ws)
    if shape.fractions is not None and len(shape.fractions) != k:
        raise ValueError(f"{len(shape.fractions)} data fractions for {k} workers")
    total = float(sum(shape.fractions)) if shape.fractions is not None else 0.0
    frac = {
        w: (shape.fractions[i] / total if shape.fractions else 1.0 / k) for i, w in enumerate(ws)
    }
    size = model_bytes(setting)
    c = constants
    p = shape.probability if k > 1 else 0.0
    speed = {w: setting.devices[w].speed for w in ws}
    compute = {w: step_compute_s(setting, w, shape.batch, shape.batch) for w in ws}
    update = {w: size * c.step_s_per_byte / speed[w] for w in ws}
    push_cpu = {w: size * (c.copy_s_per_byte + c.wire_s_per_byte) / speed[w] for w in ws}
    # receive, check every value, merge (scale and add)
    merge_cpu = {
        w: size * (c.wire_s_per_byte + c.copy_s_per_byte + 2 * c.add_s_per_byte) / speed[w]
        for w in ws
    }
    wire = {
        w: sum(size / setting.link(w, q).bandwidth_Bps for q in ws if q != w) / max(1, k - 1)
        for w in ws
    }
    rank = {w: _rank_per_sample(setting, w, shape.batch, edge) * frac[w] for w in ws}
    lanes = 1 if c.shared_interface else max(1, k - 1)  # pushes that can be on the wire at once
    carried = {w: 1.0 for w in ws}
    ratio = {w: 1.0 for w in ws}
    received = {w: p for w in ws}
    out: list[GossipWorker] = []
    for _ in range(SETTLE_ROUNDS):
        out = [
            GossipWorker(
                w,
                compute[w],
                p * carried[w] * push_cpu[w],
                received[w] * merge_cpu[w],
                update[w],
                carried[w],
                received[w],
                ratio[w],
                frac[w] * ratio[w] / shape.batch,
                rank[w] * (edge.ranked_share(ratio[w]) if edge is not None else 1.0),
                wire[w],
            )
            for w in ws
        ]
        for g in out:  # a push takes the wire for push_wire_s; more than a step's time is skipped
            demand = p * g.push_wire_s
            carried[g.worker] = min(1.0, g.step_s * lanes / demand) if demand > 0 else 1.0
        if edge is not None and edge.balance != "off":
            full = {g.worker: frac[g.worker] * g.step_s / shape.batch + g.rank_s for g in out}
            fastest = min(full.values())
            ratio = {w: max(edge.r_min, fastest / full[w]) for w in ws}
        steps = {g.worker: frac[g.worker] * ratio[g.worker] for g in out}
        for w in ws:  # every peer pushes to a random other worker after each of its steps
            sent = sum(p * carried[q] * steps[q] for q in ws if q != w) / max(1, k - 1)
            received[w] = sent / steps[w] if steps[w] > 0 else 0.0
    return out


def _rank_per_sample(setting: Setting, worker: int, batch: int, edge: EdgeShape | None) -> float:
    """EdgeGossip's ranking per sample of the shard: the forward pass of every aggregated
    point (1/ratio of the shard), of every sample (oracle), or none (random, GoSGD)."""
    if edge is None or edge.order == "random":
        return 0.0
    share = 1.0 if edge.order == "oracle" else 1.0 / edge.ratio
    return share * forward_per_sample_s(setting, worker, batch) / max(1, edge.rank_every)


def predict_gossip(
    technique: str,
    setting: Setting,
    shape: GossipShape,
    edge: EdgeShape | None = None,
    constants: Constants = DEFAULT,
) -> Prediction:
    """GoSGD's (``edge`` None) or EdgeGossip's predicted iteration: the epoch's time over the
    steps of a full equal shard, ``k b / N`` of the epoch."""
    out = gossip_workers(setting, shape, edge, constants)
    k, b = len(out), shape.batch
    scale = k * b  # an epoch per training sample -> per step of an equal shard
    crit = max(out, key=lambda g: g.epoch_s)
    epoch = crit.epoch_s
    lam = scale * crit.steps
    size = model_bytes(setting)
    p = shape.probability if k > 1 else 0.0
    sent = sum(g.steps * p * g.carried for g in out) * scale * size
    parts = {
        "compute": lam * crit.compute_s,
        "overhead": lam * (crit.push_s + crit.merge_s + crit.update_s) + scale * crit.rank_s,
        "push": lam * crit.push_s,
        "merge": lam * crit.merge_s,
        "update": lam * crit.update_s,
        "rank": scale * crit.rank_s,
        "communication": lam * p * crit.carried * crit.push_wire_s,
        "exposed_communication": 0.0,  # the transport's thread sends while the worker trains
        "idle": scale * max(epoch - g.epoch_s for g in out),
    }
    iteration = scale * epoch
    overrun = _overrun(out, edge)
    if overrun > 0:
        parts["misprediction"] = iteration * overrun
        parts["idle"] += iteration * overrun
        iteration *= 1.0 + overrun
    notes = [_gossip_pace(setting, shape, out, crit, scale)]
    notes.append(_push_note(shape, out, size, p))
    if edge is not None:
        notes.extend(_edge_notes(setting, shape, edge, out, crit, constants, iteration))
        if overrun > 0:
            cut = sum(1 for g in out if g.ratio < 1.0 - 1e-9)
            notes.append(
                f"the barrier waits for the last of the {cut} worker(s) the balancer cuts, each "
                f"off by its predictor's error (sd {edge.balance_error:.0%}): +{overrun:.0%}"
            )
    busy = crit.step_s
    notes.append(
        f"gossip work (snapshots, merges, the transport, the optimiser's step) is "
        f"{(busy - crit.compute_s) / busy:.0%} of worker {crit.worker}'s step"
    )
    notes.append(f"{scale / iteration:,.0f} samples/s predicted across the cluster")
    busy_per_worker = {g.worker: scale * g.epoch_s for g in out}  # no barrier waits
    return Prediction(
        technique, iteration, parts, int(round(sent)), tuple(notes), per_worker=busy_per_worker
    )


def _overrun(out: Sequence[GossipWorker], edge: EdgeShape | None) -> float:
    """The share the balancer's errors add to the epoch (0 for GoSGD, without a balancer, or
    where it cuts nobody). A worker the balancer cut (0 < r_i < 1) was planned to end with
    the epoch (its planned steps and ranking) and could at most train its whole shard (its
    steps over r_i, no ranking: what r = 1 costs)."""
    if edge is None or edge.balance == "off" or edge.balance_error <= 0 or not out:
        return 0.0
    epoch = max(g.epoch_s for g in out)
    if epoch <= 0:
        return 0.0
    cut = [
        (g.epoch_s / epoch, g.steps / g.ratio * g.step_s / epoch)
        for g in out
        if 0 < g.ratio < 1.0 - 1e-9 and g.ratio > edge.r_min + 1e-9  # r_min: not planned
    ]
    return expected_overrun(cut, edge.balance_error)


def _gossip_pace(
    setting: Setting,
    shape: GossipShape,
    out: Sequence[GossipWorker],
    crit: GossipWorker,
    scale: float,
) -> str:
    who = speed_label(setting, crit.worker)
    if len(out) == 1:
        return f"one worker: {ms(scale * crit.epoch_s)} a step"
    idlest = min(out, key=lambda g: g.epoch_s)
    idle = 1.0 - idlest.epoch_s / crit.epoch_s
    if not shape.sync_epochs:
        mean = sum(scale * g.epoch_s for g in out) / len(out)
        return (
            f"no epoch barrier: every worker at its own pace ({ms(mean)} a step on average); "
            f"the run ends with {who}'s, {idle:.0%} after worker {idlest.worker}'s"
        )
    return (
        f"{who} sets the pace at the epoch barrier: worker {idlest.worker} idles {idle:.0%} "
        "of the epoch"
    )


def _push_note(shape: GossipShape, out: Sequence[GossipWorker], size: int, p: float) -> str:
    least = min(out, key=lambda g: g.carried)
    if least.carried < 1.0 - 1e-9:
        return (
            f"worker {least.worker}'s link carries only {least.carried:.0%} of its pushes "
            f"({ms(least.push_wire_s)} each on the wire): the rest are skipped (a full outbox)"
        )
    return (
        f"each push sends the whole model ({size / 1e6:.2f} MB) to one peer with probability "
        f"{p:g}, overlapped with compute"
    )


def _edge_notes(
    setting: Setting,
    shape: GossipShape,
    edge: EdgeShape,
    out: Sequence[GossipWorker],
    crit: GossipWorker,
    constants: Constants,
    iteration: float,
) -> list[str]:
    ratios = ", ".join(f"{g.ratio:.2f}" for g in out)
    gosgd = predict_gossip("gosgd", setting, shape, None, constants).iteration_s
    cut = 1.0 - iteration / gosgd
    rank = crit.rank_s / crit.epoch_s
    what = {"oracle": "every sample", "random": "nothing"}.get(edge.order, f"1/{edge.ratio}")
    return [
        f"the balancer's shares r = {ratios}: the epoch predicted {cut:.0%} shorter than "
        f"epoch-synchronous GoSGD's ({ms(gosgd)} a step)",
        f"ranking ({what} of each shard, forward only) is {rank:.0%} of the epoch",
    ]


def gossip_shape(recipe: Recipe) -> GossipShape:
    """The recipe's :class:`GossipShape` (``[gossip]``, ``[train]``, ``[data]``)."""
    cfg = GossipSection.of(recipe)
    workers = [i for i, r in enumerate(recipe.role_names()) if r == "trainer"]
    data = recipe.data
    fractions = data.fractions if data.partition == "fractions" else None
    return GossipShape(
        workers, recipe.train.batch_size, cfg.probability, cfg.sync_epochs, fractions
    )


def predict_gosgd(recipe: Recipe, setting: Setting) -> Prediction:
    """The family's hook: GoSGD's model (a technique whose side names its own uses that)."""
    c = on_reference(DEFAULT, setting)
    return predict_gossip(recipe.train.technique, setting, gossip_shape(recipe), None, c)


def predict_edgegossip(recipe: Recipe, setting: Setting) -> Prediction:
    """EdgeGossip's side hook."""
    eg = EdgeGossipSection.of(recipe)
    edge = EdgeShape(eg.balance, eg.order, eg.ratio, eg.r_min, eg.rank_every, eg.rank_sample)
    c = on_reference(DEFAULT, setting)
    return predict_gossip("edgegossip", setting, gossip_shape(recipe), edge, c)
