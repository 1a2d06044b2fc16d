"""DynaComm's claims R-DC1 .. R-DC5 from the settings' runs, the prediction errors, the
trace and the weights. Pure."""

from __future__ import annotations

from typing import Any

from edgetrain.experiment.claims import claim, cut, median
from edgetrain.experiment.report import Claim, Stat, above_bound
from reproductions.dynacomm_measure import failure
from reproductions.dynacomm_plan import Plan

SCALE = (
    "MNIST 28x28 on small zoo models (lenet5, squeezenet1_1, mobilenet_v2) instead of "
    "ImageNet on VGG-19/GoogLeNet/Inception-v4/ResNet-152; 3 trainers and 1 server on one "
    "2-core machine "
    "(0.45 core each) instead of 8 Xeon workers and 4 cloud servers; tbf links, round trip "
    "emulated by the servers"
)


def build_claims(results: dict[str, Any], p: Plan) -> list[Claim]:
    seeds = list(p.seeds)
    settings = results["settings"]
    by_hold: dict[float, list[float | None]] = {}
    vs_best: list[float | None] = []
    of_ceiling: dict[float, list[float | None]] = {}
    lbl_vs_dc_10: list[float | None] = []
    for entry in settings.values():
        got = entry["results"]
        seq = median([r["iteration_s"] for r in got["sequential"]])
        dyn = median([r["iteration_s"] for r in got["dynacomm"]])
        lbl = median([r["iteration_s"] for r in got["lbl"]])
        ib = median([r["iteration_s"] for r in got["ibatch"]])
        reduction = cut(dyn, seq)
        by_hold.setdefault(entry["setting"]["hold_ms"], []).append(reduction)
        best_other = min(x for x in (lbl, ib) if x is not None) if (lbl or ib) else None
        vs_best.append(100 * (dyn / best_other - 1) if dyn and best_other else None)
        ceiling = median([r["ceiling"] for r in got["sequential"]])
        of_ceiling.setdefault(entry["setting"]["hold_ms"], []).append(
            reduction / (100 * ceiling) if reduction is not None and ceiling else None
        )
        if entry["setting"]["hold_ms"] >= 10:
            lbl_vs_dc_10.append(100 * (lbl / dyn - 1) if lbl and dyn else None)
    claims = []
    for hold, values in sorted(by_hold.items()):
        agrees = all(v is not None and v > 0 for v in values) if values else None
        claims.append(
            claim(
                "R-DC1" if hold == 0 else "R-DC2",
                f"DynaComm cuts iteration time against sequential (round trip {hold:g} ms)",
                "30.19-41.10",
                values,
                "%",
                seeds,
                agrees,
                SCALE + "; gains are bounded by min(C, M)/(C + M) of each setting",
            )
        )
    for hold, shares in sorted(of_ceiling.items()):
        claims.append(
            claim(
                "R-DC1b" if hold == 0 else "R-DC2c",
                f"DynaComm's cut as a share of the overlap ceiling min(C,M)/(C+M), round trip "
                f"{hold:g} ms",
                None,
                shares,
                "",
                seeds,
                all(v is not None and v >= 0.8 for v in shares) if not hold and shares else None,
                "goal at 0 ms: at least 0.8 of the ceiling; "
                "the paper gives no ceiling; ours is computed from the sequential run's measured "
                "costs"
                + (
                    "; every extra segment pays the round trip, which the ceiling leaves out, "
                    "so the share is lower than at 0 ms by design"
                    if hold
                    else ""
                )
                + above_bound(shares, 1.0, "the ceiling is the most overlap can save"),
            )
        )
    claims.append(
        claim(
            "R-DC1c",
            "DynaComm against the best of lbl and iBatch (iteration time, + is slower)",
            "<= 0",
            vs_best,
            "%",
            seeds,
            all(v is not None and v <= 3 for v in vs_best) if vs_best else None,
            "the paper: DynaComm always at least as good as LBL and iBatch",
        )
    )
    every_cut = [v for values in by_hold.values() for v in values]
    if every_cut:
        best = max((v for v in every_cut if v is not None), default=None)
        claims.append(
            claim(
                "R-DC1d",
                "DynaComm's cut against sequential over every setting (the goal: 30% in one "
                "setting or more)",
                "30.19-41.10",
                every_cut,
                "%",
                seeds,
                best is not None and best >= 30,
                "the max is the best setting; a setting's cut is bounded by its ceiling "
                "min(C, M)/(C + M) (R-DC1b)",
            )
        )
    if lbl_vs_dc_10:
        claims.append(
            claim(
                "R-DC2b",
                "at a 10 ms round trip, layer-by-layer is slower than DynaComm by",
                "Inception-v4 fwd: LBL 35.25% vs DynaComm 39.99%",
                lbl_vs_dc_10,
                "%",
                seeds,
                all(v is not None and v > 0 for v in lbl_vs_dc_10),
                "every extra transmission pays the emulated round trip",
            )
        )
    pred = results.get("prediction", {})
    rows: list[tuple[str, list[float | None], bool]] = [
        ("0.45-core hosts, without BSP waits", pred.get("quota_045", []), False),
        ("0.45-core hosts, BSP waits included", pred.get("quota_045_with_waits", []), False),
        (">= 0.9-core host (one trainer: no waits)", pred.get("quota_09", []), True),
    ]
    for schedule, values in (pred.get("quota_09_by_schedule") or {}).items():
        rows.append((f">= 0.9-core host, {schedule}", values, True))
    for label, values, goal in rows:
        if values:
            med = median(values)
            claims.append(
                claim(
                    "R-DC3",
                    f"|measured / predicted - 1| of the iteration time, {label}",
                    None,
                    values,
                    "",
                    seeds,
                    (med is not None and med <= 0.10) if goal else None,
                    "the paper prints no prediction error; goal: within 10% at >= 0.9 core"
                    + ("" if goal else " (reported, not held to the goal: quota bursts)"),
                )
            )
    trace = results.get("trace")
    if trace:
        failed = {k: failure(v["failed"]) for k, v in trace.items() if v.get("failed")}
        rep = trace.get("replanned", {}).get("train_s")
        frozen = trace.get("frozen", {}).get("train_s")
        lbl = trace.get("lbl", {}).get("train_s")
        claims.append(
            claim(
                "R-DC4",
                "under a bandwidth trace, re-planned DynaComm against its frozen plan "
                "(training time saved)",
                "re-plans every epoch (no figure)",
                [cut(rep, frozen)],
                "%",
                seeds[:1],
                (rep or 0) < (frozen or 0) if rep and frozen else None,
                "the paper re-plans once per epoch and shows no trace experiment"
                + "".join(
                    f"; {k} did not complete under the trace (see its section)" for k in failed
                ),
                lbl_train_s=lbl,
                failed=failed,
            )
        )
    replan = [
        r.get("replan_share_max")
        for entry in settings.values()
        for r in entry["results"].get("dynacomm", [])
    ]
    if any(v is not None for v in replan):
        claims.append(
            claim(
                "R-DC4b",
                "re-planning's cost: time spent planning over the epoch's training time "
                "(DynaComm, the largest epoch of each run)",
                "not reported (re-plans once per epoch)",
                [100 * v if v is not None else None for v in replan],
                "%",
                seeds,
                all(v is not None and v < 0.01 for v in replan),
                "goal: under 1% of an epoch; the exact DP over this model's layers, run on the "
                "trainer at the barrier",
            )
        )
    same = results.get("same_weights")
    if same is not None:
        distinct = int(same.get("distinct", 0))
        claims.append(
            Claim(
                "R-DC5",
                "distinct final models (model_sha256) over the four schedules, same seed",
                "1 (curves coincide, Fig. 8)",
                Stat(distinct, distinct, distinct),
                "",
                seeds,
                distinct == 1,
                "ours is bit for bit: the servers sum gradients in trainer order",
                {"model_sha256": same["shas"]},
            )
        )
    return claims
