"""The launcher side of DLion, Gaia and Ako: the plan every worker starts from, and GoSGD's
drain accounting.

Once every worker is ready (its pilot done, its capacity curve C_j(m) in its ``ready``
report), the controller plans (pure): DLion with ``batching`` gets capacity-aware batch sizes
(:func:`.batching.plan_batches`), everything else b0 each (Gaia and Ako, and
DLion's no-batching ablation); T_bs is the recipe's or 10% of the training set. Every worker
receives the whole plan as its start directive: everyone's batch size (so every worker knows
the cluster's samples per iteration and when an epoch ends), T_unit, the achieved spread, each
worker's capacity at its batch size and at b0, and t_iter, one iteration's compute time at b0
on the slowest worker (Ako's partition count). The workers echo the plan in their first epoch
report; the family writes it to ``plans/batches.json`` and the report shows it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from edgetrain.comm.control import Decision, Role
from edgetrain.gossip.config import DLionSection
from edgetrain.gossip.drain import GossipController
from edgetrain.gossip.exchange.batching import (
    BatchPlan,
    Curve,
    capacity_at,
    default_t_bs,
    plan_batches,
    uniform_plan,
)
from edgetrain.recipe import Recipe


def parse_curve(value: object) -> list[tuple[int, float]] | None:
    """A ``ready`` report's capacity curve, or None when it is unusable."""
    if not isinstance(value, list):
        return None
    out: list[tuple[int, float]] = []
    for point in value[:64]:
        if not (isinstance(point, list) and len(point) == 2):
            return None
        m, c = point
        if not isinstance(m, int) or isinstance(m, bool) or m < 1:
            return None
        if not isinstance(c, (int, float)) or isinstance(c, bool) or not 0 < c < 1e12:
            return None
        out.append((m, float(c)))
    return out or None


def make_plan(
    technique: str,
    dlion: DLionSection | None,
    b0: int,
    curves: Mapping[int, Curve],
    n_train: int,
) -> dict[str, Any]:
    """The start directive's plan for the workers in ``curves`` (pure); ``dlion``: DLion's
    section, whose batching and T_bs apply (None: b0 each, as Gaia and Ako)."""
    ids = sorted(curves)
    ordered = [curves[w] for w in ids]
    t_bs: int | None = None
    plan: BatchPlan
    if dlion is not None:
        t_bs = dlion.t_bs if dlion.t_bs is not None else default_t_bs(n_train, None, len(ids) * b0)
        if dlion.batching:
            floor = dlion.min_batch if dlion.min_batch is not None else max(1, b0 // 4)
            plan = plan_batches(ordered, b0, t_bs, dlion.epsilon, dlion.t_unit, floor)
        else:
            plan = uniform_plan(ordered, b0, t_bs, dlion.epsilon)
    else:
        plan = uniform_plan(ordered, b0)
    at_b0 = [capacity_at(c, b0) for c in ordered]
    doc = plan.as_dict()
    return {
        **doc,
        "batches": {str(w): m for w, m in zip(ids, plan.batches, strict=True)},
        "capacities": {str(w): c for w, c in zip(ids, plan.capacities, strict=True)},
        "capacity_at_b0": {str(w): c for w, c in zip(ids, at_b0, strict=True)},
        "curves": {str(w): [[m, c] for m, c in curves[w]] for w in ids},
        "t_bs": t_bs,
        "t_iter": max(b0 / c for c in at_b0),
        "b0": b0,
        "n_train": n_train,
        "technique": technique,
    }


class ExchangeController:
    """The plan at start; drain accounting at the end. ``dlion``: DLion's section when the
    run plans DLion's batches (None: b0 each)."""

    def __init__(
        self, recipe: Recipe, roles: Sequence[Role], dlion: DLionSection | None = None
    ) -> None:
        self.technique = recipe.train.technique
        self.dlion = dlion
        self.b0 = recipe.train.batch_size
        self.trainers = [i for i, r in enumerate(roles) if r.name == "trainer"]
        self.plan: dict[str, Any] = {}
        self._drain = GossipController()

    def on_start(self, ready: Mapping[int, Mapping[str, Any]]) -> Decision:
        curves: dict[int, Curve] = {}
        n_train = 0
        for i in self.trainers:
            if i not in ready:
                continue
            report = ready[i]
            curves[i] = parse_curve(report.get("curve")) or [(self.b0, 1.0)]
            n = report.get("n_train")
            if isinstance(n, int) and not isinstance(n, bool) and n > n_train:
                n_train = n
        if not curves:
            return Decision()
        self.plan = make_plan(self.technique, self.dlion, self.b0, curves, max(1, n_train))
        return Decision({i: {"plan": self.plan} for i in curves})

    def on_barrier(self, epoch: int, reports: Mapping[int, Mapping[str, Any]]) -> Decision:
        return Decision()

    def on_drain(self, done: Mapping[int, Mapping[str, Any]]) -> Decision:
        return self._drain.on_drain(done)
