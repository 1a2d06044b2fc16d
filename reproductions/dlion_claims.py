"""DLion's claims R-DL-1 .. R-DL-8 from the rows of its runs. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgetrain.experiment.claims import (
    Row,
    arm_values,
    by_seed,
    claim,
    cut,
    every,
    median,
    paired,
    ratio,
)
from edgetrain.experiment.report import Claim, Stat, above_bound
from edgetrain.experiment.text import fmt, stat
from reproductions.dlion_plan import (
    BEDS,
    KNEE_DELTA,
    PAPER,
    R1_ARMS,
    R3_ARMS,
    R6_ARMS,
    R7_ARMS,
    TABLE1,
    WE_TIMES,
    Plan,
)
from reproductions.dlion_regime_claims import regime_claims

IDEAL = "the ideal cut at 3:1 capacities"


def cuts(rows: Sequence[Row], arm: str, base: str, key: str) -> list[float | None]:
    """Per seed: how much less ``key`` ``arm`` took than ``base``, in percent."""
    return paired(rows, arm, base, key, cut)


def ideal_cut(shares: Sequence[float]) -> float:
    """The bound on capacity-aware batching's cut at equal total batch (gossip.md 0.3):
    1 - k C_min / sum C, in percent."""
    return 100.0 * (1.0 - len(shares) * min(shares) / sum(shares))


MODEL_NAMES = {"lenet5": "LeNet-5", "mlp": "the MLP"}  # as the report writes them


def setting(p: Plan) -> str:
    """The workload and testbed in a few words, against the paper's: ``p`` is the plan with
    the regime's chosen model and b0 in it (the full plan's default model is only its
    fallback)."""
    data = (
        "digits (1,437 train / 360 test)"
        if p.dataset == "digits"
        else "the MNIST test set (8,000 train / 2,000 test)"
    )
    data = f"{MODEL_NAMES.get(p.model, p.model)} at b0 = {p.b0} on {data}"
    where = "local processes with slowdowns in the testbed's ratios" if p.local else "emulated"
    return f"{data}; {where}; the paper: CIFAR-10, a 17 MB 2conv+2fc model, 4 servers"


def claims_r1(rows: list[Row], p: Plan) -> list[Claim]:
    """R-DL-1, the same runs' cut in time per iteration (what batching balances, apart from
    the accuracy a differently weighted gradient reaches), and R-DL-1w when the sample-weighted
    arm ran."""
    out = [claim_r1(rows, p)]
    bound = ideal_cut(BEDS["compute"].shares)
    per_it = cuts(rows, "dlion", "dlion-nobatch", "iteration_s")
    out.append(
        claim(
            "R-DL-1i",
            "capacity-aware batching: cut in time per iteration (the same runs as R-DL-1)",
            None,
            per_it,
            "%",
            list(p.r1_seeds),
            every(per_it, lambda v: v > 0),
            f"the bound {bound:.1f}% holds for compute alone; an iteration's exchange "
            "(top-k, encoding, applying k - 1 peers' gradients) does not shrink with the batch"
            + above_bound(per_it, bound + 1e-9, IDEAL),
            iteration_s={a: arm_values(rows, a, "iteration_s") for a in R1_ARMS},
        )
    )
    if by_seed(rows, "dlion-sample"):
        vals = cuts(rows, "dlion-sample", "dlion-nobatch", "time_to_high")
        out.append(
            claim(
                "R-DL-1w",
                "capacity-aware batching with sample-weighted gradients (A-35): cut in time to "
                "T_high against DLion without batching",
                None,
                vals,
                "%",
                sorted(by_seed(rows, "dlion-sample")),
                every(vals, lambda v: v > 0),
                "ours: sum_j m_j g_j / sum_j m_j instead of Eq. 5's 1/k; same seeds, testbed "
                "and targets" + above_bound(vals, bound + 1e-9, IDEAL),
                time_to_high=arm_values(rows, "dlion-sample", "time_to_high"),
            )
        )
    return out


def claim_r1(rows: list[Row], p: Plan) -> Claim:
    vals = cuts(rows, "dlion", "dlion-nobatch", "time_to_high")
    bound = ideal_cut(BEDS["compute"].shares)
    mine, base = by_seed(rows, "dlion"), by_seed(rows, "dlion-nobatch")
    never = sorted(s for s in mine if mine[s].get("time_to_high") is None)
    extra = f"; DLion never reached T_high at seed(s) {never}" if never else ""
    per_arm: dict[str, Any] = {
        key: {a: arm_values(rows, a, key) for a in ("dlion", "dlion-nobatch")}
        for key in ("idle", "iteration_s", "samples_per_s")
    }
    return claim(
        "R-DL-1",
        "capacity-aware batching: cut in time to T_high against DLion without batching "
        "(same total batch), dlion-compute-4",
        PAPER["batching_cut"],
        vals,
        "%",
        list(p.r1_seeds),
        every(vals, lambda v: v > 0),
        f"{setting(p)}; ideal bound {bound:.1f}% (1 - k C_min / sum C); the goal is >= 25%"
        + extra
        + above_bound(vals, bound + 1e-9, IDEAL),
        bound=bound,
        **per_arm,
        batches={s: r["batches"] for s, r in mine.items()},
        spread={s: r["spread"] for s, r in mine.items()},
        baseline_seeds=sorted(base),
    )


def faster(rows: list[Row], base: str, key: str) -> tuple[list[float | None], bool | None]:
    """DLion's cut against ``base`` per seed, and whether DLion reached ``key``'s target first
    at every seed (a baseline that never reached it counts as later)."""
    d, b = by_seed(rows, "dlion"), by_seed(rows, base)
    vals = cuts(rows, "dlion", base, key)
    seeds = [s for s in d if s in b]
    if not seeds or all(d[s].get(key) is None for s in seeds):
        return vals, None
    first = all(
        d[s].get(key) is not None and (b[s].get(key) is None or d[s][key] < b[s][key])
        for s in seeds
    )
    return vals, first


def claims_r2(rows: list[Row], p: Plan) -> list[Claim]:
    out = []
    for cid, base, paper in (
        ("R-DL-2", "gaia", PAPER["vs_gaia_faster"]),
        ("R-DL-2b", "ako", PAPER["vs_ako_faster"]),
    ):
        vals, first = faster(rows, base, "time_to_low")
        mine = by_seed(rows, base).items()
        never = sorted(s for s, r in mine if r.get("time_to_low") is None)
        high = sorted(s for s, r in mine if r.get("time_to_high") is not None)
        out.append(
            claim(
                cid,
                f"DLion against {base.capitalize()}: cut in time to T_low, dlion-compute-4",
                paper,
                vals,
                "%",
                list(p.r1_seeds),
                first,
                f"{setting(p)}; read as % less time (the paper's 'faster' is ambiguous: A-48)"
                + (f"; {base} never reached T_low at seed(s) {never}" if never else "")
                + f"; {base} reached T_high at seed(s) {high or 'none'}",
                attribution={
                    a: Stat.of(cuts(rows, a, base, "time_to_low"))
                    for a in ("dlion-nowe", "dlion-noadapt")
                },
                time_ratio=[
                    (100.0 / (100.0 - v)) if v is not None and v < 100 else None for v in vals
                ],
            )
        )
    return out


BYTES = {"lan": "bytes_lan", "wan": "bytes_wan", "iterations": "iterations"}


def _bytes(rows: list[Row]) -> dict[str, dict[str, float | None]]:
    """Per R-DL-3 arm: the median LAN and WAN bytes and iterations."""
    return {a: {k: median(arm_values(rows, a, f)) for k, f in BYTES.items()} for a in R3_ARMS}


def claims_r3(rows: list[Row], p: Plan) -> list[Claim]:
    out = []
    d = by_seed(rows, "dlion")
    for cid, base, paper in (
        ("R-DL-3", "gaia", PAPER["vs_gaia_acc"]),
        ("R-DL-3b", "ako", PAPER["vs_ako_acc"]),
    ):
        b = by_seed(rows, base)
        rel: list[float | None] = []
        pts: list[float | None] = []
        for s in sorted(d):
            da, ba = d[s].get("accuracy_at_budget"), b.get(s, {}).get("accuracy_at_budget")
            if da is not None and ba is not None and ba > 0:
                rel.append(100.0 * (da / ba - 1.0))
                pts.append(100.0 * (da - ba))
            else:
                rel.append(None)
                pts.append(None)
        out.append(
            claim(
                cid,
                f"DLion against {base.capitalize()}: accuracy at the fixed budget, "
                "dlion-network-4 (relative)",
                paper,
                rel,
                "%",
                list(p.seeds),
                every(rel, lambda v: v > 0),
                f"{setting(p)}; relative gain; in points: "
                f"{stat(Stat.of(pts))} pp (A-48: the paper does not say which)",
                points=Stat.of(pts),
                bytes=_bytes(rows),
            )
        )
    full = by_seed(rows, "dlion-fullge")
    share: list[float | None] = []
    gap: list[float | None] = []
    for s in sorted(d):
        pw, fw = d[s].get("wan_per_iteration"), full.get(s, {}).get("wan_per_iteration")
        share.append(100.0 * pw / fw if pw is not None and fw else None)
        # "equal accuracy": both arms train the same epochs, so their final accuracies are
        # compared; dense exchange over the WAN is so slow that its first evaluation comes
        # after the budget, where it has no accuracy at all
        pa, fa = d[s].get("final_accuracy"), full.get(s, {}).get("final_accuracy")
        gap.append(100.0 * (fa - pa) if pa is not None and fa is not None else None)
    agrees = every(share, lambda v: v <= 25.0)
    if agrees is not None:
        agrees = agrees and bool(every(gap, lambda v: v <= 1.0))
    out.append(
        claim(
            "R-DL-3c",
            "WAN bytes per iteration, partial against full gradient exchange (goal: <= 25% "
            "at accuracy within 1 point)",
            "partial GE cuts training time (Fig. 4; no byte figure)",
            share,
            "%",
            list(p.seeds),
            agrees,
            f"final accuracy (same epochs), full minus partial: {stat(Stat.of(gap))} pp; "
            "the threshold comes from each link's bandwidth (budget = T_unit x bandwidth)",
        )
    )
    return out


def _medians(rows: Sequence[Row], arms: Sequence[str], key: str) -> dict[str, float | None]:
    return {a: median(arm_values(rows, a, key)) for a in arms}


def _known(medians: dict[str, float | None]) -> dict[str, float] | None:
    """The medians if every arm has one (None: an arm has none, so no direction is judged)."""
    if any(v is None for v in medians.values()):
        return None
    return {a: float(v) for a, v in medians.items() if v is not None}


def _ablation(
    cid: str,
    text: str,
    paper: Any,
    values: Sequence[float | None],
    unit: str,
    p: Plan,
    agrees: bool | None,
    rule: str,
    /,
    **details: Any,
) -> Claim:
    """R-DL-4, -6 and -7: on the reduced seeds, agreeing by ``rule`` (what the paper shows)."""
    seeds = list(p.side_seeds)
    note = f"{setting(p)}; agrees = {rule}"
    return claim(cid, text, paper, values, unit, seeds, agrees, note, **details)


def claim_r4(rows: list[Row], p: Plan) -> Claim:
    t1 = [a for a, *_ in TABLE1]
    acc, time = _medians(rows, t1, "final_accuracy"), _medians(rows, t1, "train_s")
    full, small = by_seed(rows, "t1-full"), by_seed(rows, "t1-small")
    gain: list[float | None] = [
        100.0 * (full[s]["final_accuracy"] - small[s]["final_accuracy"])
        for s in sorted(full)
        if s in small and full[s]["final_accuracy"] is not None and small[s]["final_accuracy"]
    ]
    agrees: bool | None = None
    if (known := _known(acc)) is not None and (t := _known(time)) is not None:
        agrees = (
            known["t1-large"] == min(known.values())
            and known["t1-full"] >= max(known.values()) - 0.01
            and t["t1-warmup-speedup"] < t["t1-warmup"]
        )
    slow = time.get("t1-warmup-increase")
    return _ablation(
        "R-DL-4",
        "Table 1: WarmUpLR + SpeedUpBS + DecayLR against SmallLR + StaticBS, final accuracy",
        round(100 * (0.7220 - 0.6956), 2),
        gain,
        "pp",
        p,
        agrees,
        "LargeLR lowest, the full combination within 1 point of the best, SpeedUpBS shorter "
        "than WarmUpLR + StaticBS; IncreaseBS's time over the baseline: "
        f"{fmt(ratio(slow, time.get('t1-small')))}x (the paper: 2.2x)",
        accuracy=acc,
        train_s=time,
        paper={a: (x, t) for a, _, x, t in TABLE1},
    )


def claim_r5(res: dict[str, Any], p: Plan) -> Claim:
    k1, k10 = res.get("knee_1"), res.get("knee_10")
    n = res.get("n_train") or 0
    agrees = None
    if k1 is not None and k10 is not None:
        drops = res.get("drop_10") is not None and res["drop_10"] > KNEE_DELTA
        agrees = drops and k1 == k10
    return claim(
        "R-DL-5",
        "the total-batch knee from a 1-epoch sweep (largest total within 2 points of the best)",
        "640-960 (4 workers, CIFAR-10 50k); ~10% of N",
        [k1],
        "",
        list(p.side_seeds),
        agrees,
        f"10-epoch knee {k10}; 10% of N = {int(0.1 * n)}; T_bs = {res.get('t_bs')} for every "
        "later DLion run; agrees = a drop of more than 2 points exists and both sweeps find "
        "the same knee",
        accuracy_1=res.get("acc_1"),
        accuracy_10=res.get("acc_10"),
    )


def claim_r6(rows: list[Row], p: Plan) -> Claim:
    t = _medians(rows, R6_ARMS, "time_to_low")
    partial_cut = cuts(rows, "we6-early-partial", "we6-early-full", "time_to_low")
    agrees: bool | None = None
    if (v := _known(t)) is not None:
        partial_wins = all(v[f"we6-{w}-partial"] <= v[f"we6-{w}-full"] for w in WE_TIMES)
        early = min(v["we6-early-partial"], v["we6-periodic-partial"])
        agrees = partial_wins and early <= min(v["we6-late-partial"], v["we6-none-partial"])
    text = "when to exchange weights: partial against full GE with early WE, cut in time to "
    paper = "early ~ periodic; partial GE cuts time in every case (Fig. 4)"
    rule = "partial <= full for every WE timing, and early/periodic no later than late/none"
    return _ablation(
        "R-DL-6", text + "T_low, dlion-network-4", paper, partial_cut, "%", p, agrees, rule,
        time_to_low=t,
    )  # fmt: skip


def claim_r7(rows: list[Row], p: Plan) -> Claim:
    acc = _medians(rows, R7_ARMS, "accuracy_at_budget")
    one, none = by_seed(rows, "we7-one-async"), by_seed(rows, "we7-none")
    gain: list[float | None] = [
        100.0 * (one[s]["accuracy_at_budget"] - none[s]["accuracy_at_budget"])
        for s in sorted(one)
        if s in none
        and one[s]["accuracy_at_budget"] is not None
        and none[s]["accuracy_at_budget"] is not None
    ]
    agrees: bool | None = None
    if (v := _known(acc)) is not None:
        agrees = (
            v["we7-all"] > v["we7-partial"]
            and abs(v["we7-partial"] - v["we7-none"]) <= 0.01
            and v["we7-one-async"] >= max(v["we7-all"], v["we7-one-sync"]) - 0.005
        )
    return _ablation(
        "R-DL-7",
        "what, whom, how of WE: best -> worst, asynchronous, against no WE, accuracy at the "
        "budget, dlion-network-4",
        "WE helps except partial WE; one (to the worst) and asynchronous best (Fig. 5)",
        gain,
        "pp",
        p,
        agrees,
        "full-to-all beats partial, partial within 1 point of none, best->worst asynchronous "
        "at least as good as all and as synchronous",
        accuracy_at_budget=acc,
    )


def claim_r8(rows: list[Row], p: Plan) -> Claim:
    share: list[float | None] = []
    on, off = by_seed(rows, "sel-on"), by_seed(rows, "sel-off")
    for s in sorted(on):
        a, b = on[s].get("wan_per_iteration"), off.get(s, {}).get("wan_per_iteration")
        share.append(100.0 * a / b if a is not None and b else None)
    iters = cuts(rows, "sel-on", "sel-off", "iteration_s")
    freq: dict[str, dict[str, float | None]] = {}
    for r in (x for x in rows if x["arm"] == "sel-on"):
        for w, n in (r.get("site_sender") or {}).items():
            it = r.get("iterations") or 0
            freq.setdefault(w, {})["send"] = n / it if it and n is not None else None
            recv = (r.get("site_receiver") or {}).get(w)
            freq[w]["receive"] = recv / it if it and recv is not None else None
    sites = BEDS["sites"]
    return claim(
        "R-DL-8",
        "EXTENSION (never evaluated in the paper): selective propagation, WAN bytes per "
        "iteration against all-to-all, four one-worker sites",
        None,
        share,
        "%",
        list(p.side_seeds),
        None,
        "an extension, not a reproduction: S = R = 2 of 4 sites per iteration, senders drawn by "
        f"capacity; iteration time cut {stat(Stat.of(iters))}%",
        send_receive_frequency=freq,
        capacities=dict(zip(sites.sites, sites.shares, strict=True)),
        accuracy_at_budget=_medians(rows, ("sel-off", "sel-on"), "accuracy_at_budget"),
    )


def build_claims(res: dict[str, Any], p: Plan) -> list[Claim]:
    claims: list[Claim] = []
    if res.get("control"):
        claims.append(claim_control(res["control"], p))
    for key, many in (("r_dl_1", claims_r1), ("r_dl_2", claims_r2), ("r_dl_3", claims_r3)):
        if res.get(key):
            claims += many(res[key], p)
    for key, one in (
        ("r_dl_4", claim_r4),
        ("r_dl_5", claim_r5),
        ("r_dl_6", claim_r6),
        ("r_dl_7", claim_r7),
        ("r_dl_8", claim_r8),
    ):
        if res.get(key):
            claims.append(one(res[key], p))
    return claims + regime_claims(res)


def claim_control(rows: list[Row], p: Plan) -> Claim:
    """The control: DLion with and without batching on the compute setting the model predicts
    the least cut on, the same runs' cut in time per iteration (its own targets need not be
    reachable: another workload or period)."""
    vals = cuts(rows, "dlion", "dlion-nobatch", "iteration_s")
    seeds = sorted(by_seed(rows, "dlion"))
    return claim(
        "R-DL-1c",
        "control: capacity-aware batching's cut in time per iteration where the cost model "
        "predicts the least gain (regime.json's control)",
        None,
        vals,
        "%",
        seeds,
        None,
        f"{setting(p)}; judged against the prediction in R-DL-R (the side of the gain "
        "threshold), not against the paper",
        time_to_high={a: arm_values(rows, a, "time_to_high") for a in ("dlion", "dlion-nobatch")},
    )
