"""The EdgeGossip report's sections: the setup, a table of arms per claim, the aggregation
timings, the predictor per host, the disturbed runs and the pilot. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgetrain.experiment.claims import Row
from edgetrain.experiment.text import arm_rows, fmt, json_block, spread, table
from reproductions.edgegossip_claims import speedups
from reproductions.edgegossip_plan import R_EG_8, SCALE, T_A, Plan, heavy_model
from reproductions.edgegossip_regime_claims import regime_table

ARMS_HEAD = (
    "arm", "time to T_a s", "time to T_b s", "speed-up (T_b)", "final acc.", "averaged model",
    "spread", "ranking", "aggregation s", "predictor MAPE",
)  # fmt: skip
ARMS_NOTE = (
    "Median [min, max] over seeds. Times are training seconds (evaluation excluded) from the "
    "common start, plus the slowest worker's aggregation for EdgeGossip arms; spread is the "
    "median over epochs of slowest/fastest epoch time; ranking is its share of epoch time "
    "(%); predictor MAPE is |predicted - measured| / measured throughput (%)."
)


def arms_table(rows: list[Row], arms: Sequence[str]) -> str:
    def cells(arm: str, mine: list[Row]) -> list[str]:
        ranking = [100 * r["rank_share"] for r in mine if r["rank_share"] is not None]
        mape = [100 * r["predictor_mape"] for r in mine if r["predictor_mape"] is not None]
        return [
            arm,
            spread([r["time_to_a"] for r in mine]),
            spread([r["time_to_b"] for r in mine]),
            spread(speedups(rows, arm, "time_to_b")) if arm != "gosgd-sync" else "1",
            spread([r["final_accuracy"] for r in mine], ".4f"),
            spread([r["averaged_accuracy"] for r in mine], ".4f"),
            spread([r["spread_median"] for r in mine], ".2f"),
            spread(ranking, ".1f"),
            spread([r["aggregate_s"] for r in mine], ".2f"),
            spread(mape, ".1f"),
        ]

    body = [cells(arm, mine) for arm, mine in arm_rows(rows, arms)]
    return table(ARMS_HEAD, "l" + "r" * 9, body) + "\n\n" + ARMS_NOTE


def aggregation_table(r4: dict[str, Any]) -> str:
    lines = [
        "| samples | method | ratio | points | reduce s | divide s | aggregate s | "
        "total s | of one epoch |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in r4["rows"]:
        t = r["timings"]
        lines.append(
            f"| {r['samples']} | {r['method']} | {r['ratio']} | {r['points']} | "
            f"{t['reduce']:.3f} | {t['divide']:.3f} | {t['aggregate']:.3f} | "
            f"{r['total_s']:.3f} | {100 * r['of_epoch']:.1f}% |"
        )
    epochs = ", ".join(f"{n} samples {s:.2f} s" for n, s in r4["epoch_s"].items())
    lines += ["", f"One training epoch ({r4['model']}, same process): {epochs}."]
    return "\n".join(lines)


def predictor_table(r5: dict[str, Any]) -> str:
    lines = [
        "| host | held-out MAPE | records | t0 s (step) | seconds |",
        "|---|---:|---:|---:|---:|",
    ]
    for h, v in r5.items():
        lines.append(
            f"| {h} | {100 * v['mape_held_out']:.2f}% | {v['records']} | "
            f"{v['t0_s']:.5f} | {v['seconds']:.0f} |"
        )
    return "\n".join(lines)


def disturbed_table(rows: list[Row]) -> str:
    lines = ["| arm | seed | spread per epoch | train s |", "|---|---:|---|---:|"]
    for r in rows:
        spreads = " ".join(fmt(s, ".2f") for s in r.get("spreads") or [])
        lines.append(f"| {r['arm']} | {r['seed']} | {spreads} | {fmt(r['train_s'], '.1f')} |")
    return "\n".join(lines)


def sections(res: dict[str, Any], p: Plan) -> list[tuple[str, str]]:
    out = [
        ("Setup", setup_text(p, res)),
        ("R-EG-1: arms (interleaved, same seeds)", arms_table(res["r_eg_1"], p.arms)),
    ]
    if res.get("r_eg_8"):
        out.append(("R-EG-8: non-IID shards", arms_table(res["r_eg_8"], R_EG_8)))
    for k, rows in (res.get("r_eg_2") or {}).items():
        out.append((f"R-EG-2: imbalance {k}x", arms_table(rows, ("gosgd-sync", "edgegossip"))))
    if res.get("r_eg_3"):
        both = res["r_eg_1"] + res["r_eg_3"]
        ratios = ("gosgd-sync", "eg-ratio5", "edgegossip", "eg-ratio20")
        out.append(("R-EG-3: aggregation ratios", arms_table(both, ratios)))
    if res.get("r_eg_4"):
        out.append(("R-EG-4: generating the aggregates", aggregation_table(res["r_eg_4"])))
    if res.get("r_eg_5"):
        out.append(("R-EG-5: predictor per host", predictor_table(res["r_eg_5"])))
    for scenario, rows in (res.get("r_eg_7") or {}).items():
        out.append((f"R-EG-7: {scenario}", disturbed_table(rows)))
    if res.get("regime"):
        out.append(
            ("Regime first: the cost model's map, predicted before the runs", regime_table(res))
        )
    for name, text in res.get("testbeds", {}).items():
        out.append((f"Testbed verification: {name}", text))
    out.append(("Pilot (seed 0, not reused)", json_block(res["pilot"])))
    return out


EMULATED = (
    "the emulated testbed edgegossip-4 (gpu-a 0.76, gpu-b 0.57, cpu-a 0.38, cpu-b 0.19 core, "
    "1 Gbit/s LAN), one worker per host"
)
DATA = {
    "digits": "digits (1,437 train / 360 test)",
    "mnist": "the MNIST test set split 8,000 train / 2,000 test",
}


def setup_text(p: Plan, res: dict[str, Any]) -> str:
    where = "local processes with slowdowns in the testbed's ratios" if p.local else EMULATED
    data = DATA[p.dataset]
    return (
        f"{p.model} on {data}, IID shards (R-EG-8: Dirichlet(0.5) per class), on {where}; "
        "SGD lr 0.01 (digits 0.05), momentum 0.9, "
        f"batch 64 (digits 32); GoSGD p = 0.25 in every arm; {p.epochs} epochs (R-EG-2/7: "
        f"{p.side_epochs}); measured seeds {', '.join(map(str, p.seeds))}, pilot seed "
        f"{p.pilot_seed}. EdgeGossip: svd-sample + k-means at ratio 10 on each worker's shard "
        "before training (its time added to the clock), Algorithm 1 at every barrier with "
        "predictive balance (RG(U) from each host's R-EG-5 history when run), Algorithm 2 with "
        "the three fixes, ranking every third epoch a random sample of 2 r_i of the points, "
        "none where r_i = 1 keeps them all (the paper: every point every epoch; rank_every = 3 "
        "and rank_sample = 2 are edgetrain's defaults), per-class selection and the kept "
        "subsets shuffled (eg-ranked: in rank order, as printed; eg-literal: the paper's "
        "global ranking in rank order). "
        f"Targets: T_a = {T_A}, T_b = {fmt(res['targets'].get('b'), '.4f')} (on the rising "
        "curve, fixed by the pilots of epoch-synchronous GoSGD and EdgeGossip: the lowest "
        "accuracy either had at half its training time, at least half a point under the lower "
        "of their plateaus). The asynchronous GoSGD arm trains the same epochs (no "
        "time budget exists); its point for epoch E is when its slowest worker ended E."
        + r_eg_6_text(p)
    )


def r_eg_6_text(p: Plan) -> str:
    """What R-EG-6 runs, where the plan runs it ("" where not)."""
    parts = []
    if (heavy := heavy_model(p)) is not None:
        parts.append(f"{heavy} on edgegossip-4 for {p.heavy_epochs} epochs")
    if p.scale:
        beds = "; ".join(
            f"{len(s)} platforms {'/'.join(f'{x:g}' for x in s)} core" for s in SCALE.values()
        )
        parts.append(f"{p.model} for {p.scale_epochs} epochs on {beds} (one LAN as edgegossip-4)")
    if not parts:
        return ""
    return (
        " R-EG-6 (time per epoch): GoSGD and EdgeGossip with "
        + ", and with ".join(parts)
        + "; the predictor starts from each run's first epoch (no R-EG-5 history)."
    )
