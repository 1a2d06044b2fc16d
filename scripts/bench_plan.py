"""Benchmark: DynaComm planning time per direction, edgetrain's exact algorithm vs the paper's."""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from edgetrain.plan import dynacomm
from edgetrain.plan.costs import LayerCosts

TARGETS = {300: 0.1, 1000: 2.0}


def _best_of(fn, costs: LayerCosts, repeats: int) -> tuple[float, float]:
    times, value = [], 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = fn(costs)[0]
        times.append(time.perf_counter() - t0)
    return min(times), value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", default="50,150,300,1000")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--paper-max", type=int, default=300, help="largest L for the O(L^3) DP")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for layers in (int(x) for x in args.layers.split(",")):
        costs = LayerCosts.random(rng, layers, dt=0.05)
        row: dict[str, object] = {"layers": layers}
        for direction, fast, paper in (
            ("forward", dynacomm.forward, dynacomm.paper_forward),
            ("backward", dynacomm.backward, dynacomm.paper_backward),
        ):
            t_fast, v_fast = _best_of(fast, costs, args.repeats)
            row[f"{direction}_s"] = t_fast
            if layers <= args.paper_max:
                t_paper, v_paper = _best_of(paper, costs, 1)
                row[f"{direction}_paper_s"] = t_paper
                row[f"{direction}_same_optimum"] = bool(
                    abs(v_fast - v_paper) <= 1e-9 * max(1.0, v_paper)
                )
        target = TARGETS.get(layers)
        if target is not None:
            row["target_s"] = target
            row["meets_target"] = max(row["forward_s"], row["backward_s"]) < target  # type: ignore[type-var]
        rows.append(row)
    if args.format == "json":
        print(json.dumps({"machine": platform.processor() or platform.machine(), "rows": rows}))
        return
    print(
        f"{'L':>6} {'forward s':>11} {'backward s':>11} {'paper fwd s':>12} "
        f"{'paper bwd s':>12} {'same':>5} {'target':>8}"
    )
    for r in rows:
        paper_f = f"{r['forward_paper_s']:.4f}" if "forward_paper_s" in r else "-"
        paper_b = f"{r['backward_paper_s']:.4f}" if "backward_paper_s" in r else "-"
        same = (
            str(r["forward_same_optimum"] and r["backward_same_optimum"])
            if "forward_same_optimum" in r
            else "-"
        )
        target = (
            f"<{r['target_s']}s {'ok' if r['meets_target'] else 'MISSED'}"
            if "target_s" in r
            else ""
        )
        print(
            f"{r['layers']:>6} {r['forward_s']:>11.5f} {r['backward_s']:>11.5f} "
            f"{paper_f:>12} {paper_b:>12} {same:>5} {target:>8}"
        )


if __name__ == "__main__":
    main()
