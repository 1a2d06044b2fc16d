"""The DLion report's sections: the setup, a table of arms per claim, the knee sweep and the
pilot. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgetrain.experiment.claims import Row
from edgetrain.experiment.text import arm_rows, fmt, spread, table
from reproductions.dlion_claims import setting
from reproductions.dlion_plan import (
    LRS,
    R1_ARMS,
    R2_ARMS,
    R3_ARMS,
    R6_ARMS,
    R7_ARMS,
    TABLE1,
    TOTALS,
    Plan,
)
from reproductions.dlion_regime_claims import calibrated_table, regime_table

GROUPS = (
    ("r_dl_1", "R-DL-1: capacity-aware batching", R1_ARMS),
    ("r_dl_2", "R-DL-2: DLion against Gaia and Ako (compute heterogeneity)", R2_ARMS),
    ("r_dl_3", "R-DL-3: network heterogeneity", R3_ARMS),
    ("r_dl_4", "R-DL-4: Table 1 combinations", tuple(a for a, *_ in TABLE1)),
    ("r_dl_6", "R-DL-6: when to exchange weights", R6_ARMS),
    ("r_dl_7", "R-DL-7: what, whom and how of WE", R7_ARMS),
    ("r_dl_8", "R-DL-8 (extension): selective propagation", ("sel-off", "sel-on")),
)


ARMS_HEAD = (
    "arm", "time to T_high s", "time to T_low s", "accuracy at budget", "final accuracy",
    "train s", "iteration ms", "idle (max worker)", "LAN MiB", "WAN MiB", "batches",
)  # fmt: skip
ARMS_NOTE = (
    "Median [min, max] over seeds. Times are training seconds (evaluation and the capacity "
    "pilot excluded; evaluation deferred: epoch-end snapshots scored after training, so no "
    "host spends CPU quota on it while the clock runs) from the common start; idle is the "
    "largest worker's share of training time spent waiting for peers; batches are the first "
    "measured seed's."
)


def _arm_cells(arm: str, mine: list[Row]) -> list[str]:
    idle = [max((v for v in r["idle"].values() if v is not None), default=None) for r in mine]
    return [
        arm,
        spread([r.get("time_to_high") for r in mine]),
        spread([r.get("time_to_low") for r in mine]),
        spread([r.get("accuracy_at_budget") for r in mine], ".4f"),
        spread([r["final_accuracy"] for r in mine], ".4f"),
        spread([r["train_s"] for r in mine]),
        spread([1000 * r["iteration_s"] for r in mine if r["iteration_s"]]),
        spread(idle, ".2f"),
        spread([r["bytes_lan"] / 2**20 for r in mine], ".1f"),
        spread([r["bytes_wan"] / 2**20 for r in mine], ".1f"),
        " ".join(str(b) for _, b in sorted(mine[0]["batches"].items())),
    ]


def arms_table(rows: list[Row], arms: Sequence[str]) -> str:
    body = [_arm_cells(arm, mine) for arm, mine in arm_rows(rows, arms)]
    return table(ARMS_HEAD, "l" + "r" * 9 + "l", body) + "\n\n" + ARMS_NOTE


def knee_table(res: dict[str, Any]) -> str:
    lines = ["| total batch | accuracy after 1 epoch | after 10 epochs |", "|---:|---:|---:|"]
    for total in TOTALS:
        a1 = (res.get("acc_1") or {}).get(str(total))
        a10 = (res.get("acc_10") or {}).get(str(total))
        lines.append(f"| {total} | {fmt(a1, '.4f')} | {fmt(a10, '.4f')} |")
    lines += ["", f"Knee after 1 epoch: {res.get('knee_1')}, after 10: {res.get('knee_10')}."]
    return "\n".join(lines)


def sections(res: dict[str, Any], p: Plan) -> list[tuple[str, str]]:
    out = [("Setup", setup_text(p, res))]
    if res.get("regime"):
        out.append(("Regime: predicted before the runs, and measured", regime_table(res)))
    if res.get("regime_calibrated"):
        title = "Cost model calibrated on the pilot, and measured"
        out.append((title, calibrated_table(res)))
    for key, title, arms in GROUPS:
        if res.get(key):
            out.append((title, arms_table(res[key], arms)))
    if res.get("control"):
        control = (res.get("regime") or {}).get("control")
        title = f"R-DL-1c: the control ({control}, where the model predicts the least gain)"
        out.append((title, arms_table(res["control"], ("dlion", "dlion-nobatch"))))
    if res.get("r_dl_5"):
        out.append(("R-DL-5: batch threshold", knee_table(res["r_dl_5"])))
    for name, text in res.get("testbeds", {}).items():
        out.append((f"Testbed verification: {name}", text))
    out.append(("Pilot (seed 0, not reused)", pilot_table(res["pilot"])))
    return out


def pilot_table(pilot: dict[str, Any]) -> str:
    """The pilot's runs (their accuracy curves are in the JSON report) and the learning rates
    it tried."""
    lines = [
        f"Seed {pilot.get('seed')}. Each arm's accuracy curve is in `paper-vs-edgetrain.json`.",
        "",
        "| run | eta | final accuracy | train s |",
        "|---|---:|---:|---:|",
    ]
    for r in pilot.get("runs", []):
        name = f"{r['arm']}{r.get('tag') or ''}"
        lines.append(
            f"| {name} | {fmt(r.get('lr'), 'g')} | {fmt(r.get('final_accuracy'), '.4f')} | "
            f"{fmt(r.get('train_s'), '.1f')} |"
        )
    for bed, families in (pilot.get("lr_finals") or {}).items():
        for family, finals in families.items():
            tried = ", ".join(f"{lr}: {fmt(a, '.4f')}" for lr, a in finals.items())
            lines += ["", f"{bed}, {family}: learning rates tried (final accuracy): {tried}."]
    return "\n".join(lines)


def setup_text(p: Plan, res: dict[str, Any]) -> str:
    where = (
        "local processes with slowdowns in each testbed's CPU ratios (no link limits; the "
        "recipe names the sites)"
        if p.local
        else "the emulated testbeds dlion-compute-4 (CPU 0.9/0.3/0.3/0.3, 1 Gbit/s LAN), "
        "dlion-network-4 (3 + 1 hosts of 0.45 core, 1 Gbit/s LANs, 100 Mbit/s WAN) and, for "
        "R-DL-8, four one-host sites (0.7/0.5/0.4/0.3, 100 Mbit/s WAN)"
    )
    t = res.get("targets", {})
    chosen = res.get("setting") or {}
    period = chosen.get("period_ms")
    regime = (
        f"Regime first: the cost model chose {chosen.get('key')} before any run (model "
        f"{chosen.get('model')}, b0 = {chosen.get('b0')}, on {chosen.get('testbed')}"
        + (f", CPU quota period {period} ms" if period else ", no CPU quota")
        + "; the Regime section has the map). "
        if chosen
        else ""
    )
    lrs = res.get("lrs") or {}
    tuned = "; ".join(
        f"{bed}: " + ", ".join(f"{f} {lr:g}" for f, lr in by.items()) for bed, by in lrs.items()
    )
    eta = (
        "eta per arm family and testbed, each family (DLion, Gaia, Ako) picked by its own "
        f"pilots from {', '.join(map(str, LRS))} (the highest mean accuracy over the pilot's "
        "epochs, which favours an eta that rises early and stays up over one that collapses "
        f"and climbs back; every arm at its family's): {tuned or '-'}"
        if p.lr is None
        else f"eta = {p.lr} (fixed) in every arm"
    )
    return (
        f"{regime}{setting(p)}, IID shards, one worker per host on {where}. SGD momentum 0.9, "
        f"b0 = {p.b0}, {eta}, "
        f"{p.epochs} epochs (a global epoch: N samples across the cluster); iteration-"
        "synchronous (staleness 0) in every arm; Eq. 5 weighting (1/k per worker). DLion: "
        "capacity-aware batches from a pilot of timed steps (not in the clock), WarmUpLR + "
        "SpeedUpBS + DecayLR, partial GE with per-link residuals under a budget of T_unit x "
        "the link's bandwidth, dense where choosing the top k costs the worker more than it "
        "saves on the link (select_cost, ours), full WE best -> worst every 10 iterations while "
        "pi < 0.2. "
        f"T_bs = {res.get('t_bs')}. Targets, on the rising curve from the pilots (the lowest "
        "accuracy a pilot had at half its training time, half a point under the lowest "
        f"plateau at least): T_high = {fmt(t.get('high'), '.4f')} (DLion's pilots), T_low = "
        f"{fmt(t.get('low'), '.4f')} (every pilot); budgets: {res.get('budgets') or '-'} s. "
        f"Measured seeds {', '.join(map(str, p.seeds))} (R-DL-1 and R-DL-2: "
        f"{', '.join(map(str, p.r1_seeds))}; R-DL-4 to "
        f"R-DL-8: {', '.join(map(str, p.side_seeds))}, to bound the plan's time); pilot "
        f"seed {p.pilot_seed}."
    )
