"""The plan JSON: the contract other tools read, plus context for people."""

from __future__ import annotations

from typing import Any

from edgetrain.plan.costs import LayerCosts
from edgetrain.plan.strategies import StrategyResult, plan_all, verdict
from edgetrain.plan.units import format_bandwidth


def plan_document(
    costs: LayerCosts, bandwidth_Bps: float | None = None, dt_source: str | None = None
) -> tuple[dict[str, Any], dict[str, StrategyResult]]:
    """``{"strategies": {name: {forward_cuts, backward_cuts, forward_s, backward_s, iteration_s,
    speedup_vs_sequential}}, ...}`` and the results behind it (for tables and plots)."""
    results = plan_all(costs)
    doc: dict[str, Any] = {
        "strategies": {name: r.to_dict() for name, r in results.items()},
        "layers": costs.num_layers,
        "layer_names": list(costs.names),
        "dt_s": costs.dt,
        "verdict": verdict(costs),
    }
    if bandwidth_Bps is not None:
        doc["bandwidth_Bps"] = bandwidth_Bps
        doc["bandwidth"] = format_bandwidth(bandwidth_Bps)
    if dt_source is not None:
        doc["dt_source"] = dt_source
    return doc, results
