"""Every strategy on one set of costs: cuts, predicted times, speed-up, and a verdict."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgetrain.plan import dynacomm
from edgetrain.plan.baselines import (
    ibatch_cuts,
    ibatch_variant_cuts,
    lbl_cuts,
    sequential_cuts,
)
from edgetrain.plan.costs import LayerCosts
from edgetrain.plan.simulator import Timeline, simulate

# Below this share of the iteration, overlapping communication with compute cannot matter.
NEGLIGIBLE = 0.10


@dataclass(frozen=True)
class StrategyResult:
    forward_cuts: list[int]
    backward_cuts: list[int]
    timeline: Timeline
    speedup_vs_sequential: float

    def to_dict(self) -> dict[str, Any]:
        t = self.timeline
        return {
            "forward_cuts": self.forward_cuts,
            "backward_cuts": self.backward_cuts,
            "forward_s": t.forward_s,
            "backward_s": t.backward_s,
            "iteration_s": t.iteration_s,
            "speedup_vs_sequential": self.speedup_vs_sequential,
        }


def dynacomm_cuts(costs: LayerCosts) -> tuple[list[int], list[int]]:
    return dynacomm.forward(costs)[1], dynacomm.backward(costs)[1]


@dataclass(frozen=True)
class Schedule:
    """How a parameter-server technique cuts an iteration: its cutter, and whether its cuts
    depend on measured costs (re-planned as they come) or only on the layer count (fixed)."""

    cutter: Callable[[LayerCosts], tuple[list[int], list[int]]]
    cost_aware: bool


# The parameter-server techniques' schedules, by technique name (the registry's ps entries).
SCHEDULES: dict[str, Schedule] = {
    "sequential": Schedule(sequential_cuts, cost_aware=False),
    "lbl": Schedule(lbl_cuts, cost_aware=False),
    "ibatch": Schedule(ibatch_cuts, cost_aware=True),
    "dynacomm": Schedule(dynacomm_cuts, cost_aware=True),
}
STRATEGIES = tuple(SCHEDULES)  # the strategies `edgetrain plan` compares
CUTTERS: dict[str, Callable[[LayerCosts], tuple[list[int], list[int]]]] = {
    **{name: schedule.cutter for name, schedule in SCHEDULES.items()},
    # not one of the four planned strategies: the greedy edgetrain had before the faithful
    # iBatch (first segment fixed to layer 1, two-sided slack), for comparison only
    "ibatch-variant": ibatch_variant_cuts,
}


def plan_all(costs: LayerCosts) -> dict[str, StrategyResult]:
    """Cuts and simulated times of the four strategies."""
    timelines: dict[str, tuple[list[int], list[int], Timeline]] = {}
    for name in STRATEGIES:
        fwd, bwd = CUTTERS[name](costs)
        timelines[name] = (fwd, bwd, simulate(costs, fwd, bwd))
    base = timelines["sequential"][2].iteration_s
    return {
        name: StrategyResult(fwd, bwd, tl, base / tl.iteration_s if tl.iteration_s > 0 else 1.0)
        for name, (fwd, bwd, tl) in timelines.items()
    }


def verdict(costs: LayerCosts) -> dict[str, Any]:
    """Whether scheduling can help: overlap saves at most min(compute, communication)."""
    compute = float(costs.fc.sum() + costs.bc.sum())
    comm = float(costs.pt.sum() + costs.gt.sum()) + 2 * costs.dt
    total = compute + comm
    ceiling = min(compute, comm) / total if total > 0 else 0.0
    if ceiling < NEGLIGIBLE:
        which = "compute" if compute > comm else "communication"
        text = (
            f"{which} dominates ({max(compute, comm) / max(min(compute, comm), 1e-300):.0f}x "
            f"the other): scheduling can save at most {ceiling:.1%} of the iteration"
        )
    else:
        text = f"compute and communication are comparable: overlap can save up to {ceiling:.0%}"
    return {
        "compute_s": compute,
        "communication_s": comm,
        "max_saving_fraction": ceiling,
        "scheduling_helps": ceiling >= NEGLIGIBLE,
        "text": text,
    }
