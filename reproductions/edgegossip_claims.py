"""EdgeGossip's claims R-EG-1 .. R-EG-7 from the rows of its runs and its probes. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgetrain.experiment.claims import (
    Row,
    by_seed,
    claim,
    every,
    median,
    paired,
    ratio,
)
from edgetrain.experiment.report import Claim, Stat
from reproductions.edgegossip_plan import BALANCES, PAPER, SPEEDUP_BOUND, Plan
from reproductions.edgegossip_regime_claims import r_eg_6, regime_claims


def speedups(rows: Sequence[Row], arm: str, key: str) -> list[float | None]:
    """Per seed: the baseline's (epoch-synchronous GoSGD's) ``key`` over the arm's."""
    return paired(rows, "gosgd-sync", arm, key)


def _overhead(r: Row) -> float | None:
    """Aggregation plus ranking as a share of a run's training time (aggregation included)."""
    train, agg, rank = r.get("train_s"), r.get("aggregate_s") or 0.0, r.get("rank_share")
    if not train or rank is None:
        return None
    share: float = (agg + rank * train) / (train + agg)
    return share


def _scale(p: Plan) -> str:
    scale = (
        "4 emulated hosts (0.76/0.57/0.38/0.19 core) on one 2-core machine instead of 2 CPU and 2"
        " GPU servers; LeNet-5 on the MNIST test set (8,000/2,000) instead of MNIST's 60,000; no "
        "co-running MapReduce jobs in R-EG-1"
        if not p.local
        else "local processes with slowdowns 1/1.33/2/4 (sleeping, invisible to /proc)"
    )
    if p.dataset == "digits":
        scale += f"; digits (1,437 samples) with {'an MLP' if p.model == 'mlp' else 'LeNet-5'}"
    return scale


def _lost(rows: Sequence[Row], arm: str) -> list[float | None]:
    """Per seed: the baseline's final accuracy minus ``arm``'s, in points."""
    base, mine = by_seed(rows, "gosgd-sync"), by_seed(rows, arm)
    return [
        100 * (base[s]["final_accuracy"] - mine[s]["final_accuracy"])
        for s in mine
        if s in base and base[s]["final_accuracy"] and mine[s]["final_accuracy"]
    ]


def noniid_claims(rows: Sequence[Row], seeds: list[int]) -> list[Claim]:
    """R-EG-8, on non-IID shards (Dirichlet(0.5) per class; the paper ran IID only): what the
    aggregates add over a random kept share, EdgeGossip's accuracy against epoch-synchronous
    GoSGD's, and its speed-up per epoch, all at the same epochs."""
    agg, rnd = by_seed(rows, "edgegossip"), by_seed(rows, "eg-random")
    gained = [
        100 * (agg[s]["final_accuracy"] - rnd[s]["final_accuracy"])
        for s in agg
        if s in rnd and agg[s]["final_accuracy"] and rnd[s]["final_accuracy"]
    ]
    where = "non-IID shards (Dirichlet(0.5) per class), same epochs"
    return [
        claim(
            "R-EG-8",
            f"{where}: the aggregates' final accuracy over a random kept share",
            None,
            gained,
            "pp",
            seeds,
            None,
            "not in the paper (IID only, spec A-30); the regime where the choice of kept samples "
            "can matter, beside R-EG-1d's IID control; positive: the aggregates kept better",
        ),
        claim(
            "R-EG-8b",
            f"{where}: accuracy lost by EdgeGossip against epoch-synchronous GoSGD",
            None,
            _lost(rows, "edgegossip"),
            "pp",
            seeds,
            None,
            "not in the paper; slow hosts train on a share of their shard, and here their shard "
            "holds classes the others lack",
        ),
        claim(
            "R-EG-8c",
            f"{where}: EdgeGossip's speed-up per epoch over epoch-synchronous GoSGD",
            None,
            speedups(rows, "edgegossip", "train_s"),
            "x",
            seeds,
            None,
            "training time over the same epochs (aggregation not included); shards of unequal "
            "size, so GoSGD's epoch waits for the slowest host's shard, whatever its size",
        ),
    ]


def build_claims(res: dict[str, Any], p: Plan) -> list[Claim]:
    seeds = list(p.seeds)
    rows = res["r_eg_1"]
    claims: list[Claim] = []
    sp = speedups(rows, "edgegossip", "time_to_b")
    over = [s for s in sp if s is not None and s > SPEEDUP_BOUND]
    claims.append(
        claim(
            "R-EG-1",
            "EdgeGossip's time to target T_b against epoch-synchronous GoSGD (speed-up)",
            PAPER["speedup"],
            sp,
            "x",
            seeds,
            every(sp, lambda v: v > 1),
            _scale(p)
            + "; aggregation time added to EdgeGossip's clock; T_b from the pilot; "
            + (
                f"{len(over)} seed(s) above the {SPEEDUP_BOUND:g}x bound: a measuring error"
                if over
                else f"bound {SPEEDUP_BOUND:g}x per epoch"
            ),
            target_b=res["targets"].get("b"),
            arms={
                a: {
                    "speedup_b": Stat.of(speedups(rows, a, "time_to_b")),
                    "speedup_a": Stat.of(speedups(rows, a, "time_to_a")),
                }
                for a in p.arms
                if a != "gosgd-sync"
            },
        )
    )
    loss = _lost(rows, "edgegossip")
    claims.append(
        claim(
            "R-EG-1b",
            "accuracy lost against epoch-synchronous GoSGD (final, mean of workers)",
            PAPER["loss_pp"],
            loss,
            "pp",
            seeds,
            every(loss, lambda v: v <= 1.0 + 1e-9),
            "same epochs in both arms; EdgeGossip trains on r_i of each shard per epoch",
        )
    )
    ranked_loss = _lost(rows, "eg-ranked")
    if ranked_loss:
        claims.append(
            claim(
                "R-EG-1e",
                "accuracy lost with the kept subsets in rank order (the printed Algorithm 2) "
                "instead of shuffled",
                PAPER["loss_pp"],
                ranked_loss,
                "pp",
                seeds,
                every(ranked_loss, lambda v: v <= 1.0 + 1e-9),
                "rank order builds minibatches from a few single-class clusters, hardest first; "
                "the reason edgetrain shuffles the kept subsets by default",
            )
        )
    for cid, arm, text, note in (
        ("R-EG-1c", "gosgd-async", "GoSGD without barriers against epoch-synchronous GoSGD",
         "not in the paper"),
        ("R-EG-1d", "eg-random", "EdgeGossip with a random kept share (no aggregates)",
         "isolates what the aggregates add"),
    ):  # fmt: skip
        if arm in p.arms:
            vals = speedups(rows, arm, "time_to_b")
            claims.append(
                claim(cid, f"{text}: speed-up to T_b", None, vals, "x", seeds, None, note)
            )
    if res.get("r_eg_8"):
        claims.extend(noniid_claims(res["r_eg_8"], seeds))
    if res.get("r_eg_2"):
        claims.append(_imbalance_claim(res["r_eg_2"], seeds))
    if res.get("r_eg_3"):
        claims.append(_ratio_claim(res["r_eg_3"], rows, seeds))
    if res.get("r_eg_4"):
        claims.append(_generation_claim(res["r_eg_4"]))
    if res.get("r_eg_5"):
        claims.append(_predictor_claim(res["r_eg_5"], rows, seeds))
    for scenario, cid in (("load", "R-EG-7"), ("quota", "R-EG-7b")):
        if res.get("r_eg_7", {}).get(scenario):
            claims.append(_contention_claim(cid, scenario, res["r_eg_7"][scenario], seeds))
    claims.extend(regime_claims(res))
    claims.extend(r_eg_6(res))
    return claims


def _imbalance_claim(r2: dict[str, list[Row]], seeds: list[int]) -> Claim:
    def growth(arm: str) -> list[float | None]:
        one, five = by_seed(r2["1"], arm), by_seed(r2["5"], arm)
        return [ratio(five[s]["train_s"], one[s]["train_s"]) for s in five if s in one]

    eg, go = growth("edgegossip"), growth("gosgd-sync")
    eg_m, go_m = median(eg), median(go)
    return claim(
        "R-EG-2",
        "EdgeGossip's training time at 5x imbalance over its time at 1x",
        "about 1 (Fig. 12: stays flat while GoSGD's grows)",
        eg,
        "x",
        seeds,
        eg_m is not None and go_m is not None and eg_m < go_m,
        "fixed epochs (training time, not time to target); 2 fast + 2 slow hosts",
        gosgd_growth=Stat.of(go),
        speedup_by_imbalance={
            k: Stat.of(speedups(v, "edgegossip", "train_s")) for k, v in r2.items()
        },
    )


def _ratio_claim(r3: list[Row], rows: list[Row], seeds: list[int]) -> Claim:
    by_ratio = {
        10: [r for r in rows if r["arm"] == "edgegossip"],
        5: [r for r in r3 if r["arm"] == "eg-ratio5"],
        20: [r for r in r3 if r["arm"] == "eg-ratio20"],
    }
    shares = {k: [_overhead(r) for r in v] for k, v in by_ratio.items()}
    acc = {k: median([r["final_accuracy"] for r in v]) for k, v in by_ratio.items()}
    med = {k: median(v) for k, v in shares.items()}
    falls = all(
        med[a] is not None and med[b] is not None and med[a] >= med[b]  # type: ignore[operator]
        for a, b in ((5, 10), (10, 20))
    )
    return claim(
        "R-EG-3",
        "aggregation and ranking, share of EdgeGossip's training time (ratio 10)",
        PAPER["share"],
        [100 * s for s in shares[10] if s is not None],
        "%",
        seeds,
        falls and (med[10] or 1) <= 0.05,
        "share = (slowest aggregation + ranking share x training time) / (training + "
        "aggregation); the paper times Spark's aggregation apart; edgetrain ranks every third "
        "epoch (rank_every = 3) a random 2 r_i of the points (rank_sample = 2) and none at "
        "r_i = 1, the paper every point every epoch",
        share_by_ratio={k: Stat.of(v) for k, v in shares.items()},
        accuracy_by_ratio=acc,
    )


def _generation_claim(r4: dict[str, Any]) -> Claim:
    rows = r4["rows"]
    mine = [r for r in rows if r["method"] == "svd-sample+kmeans" and r["ratio"] == 10]
    first = mine[0] if mine else None
    totals: dict[tuple[str, int], dict[int, float]] = {}
    for r in rows:
        totals.setdefault((r["method"], r["samples"]), {})[r["ratio"]] = r["total_s"]
    # cost falls as the ratio grows (10% of slack for timing noise)
    falls = all(t[5] >= 0.9 * t[10] and t[10] >= 0.9 * t[20] for t in totals.values())
    value = 100 * first["of_epoch"] if first else None
    n = first["samples"] if first else "-"
    return claim(
        "R-EG-4",
        f"generating svd-sample+kmeans aggregates at ratio 10 ({n} samples), as a share of one "
        "training epoch on them",
        "much shorter than training (Fig. 7)",
        [value],
        "%",
        [],
        (value is not None and value < 100) and falls,
        "timed in the launcher's process, not in an emulated host; faiss k-means; the paper "
        "times BigDL on Spark",
        rows=rows,
        epoch_s=r4["epoch_s"],
    )


def _predictor_claim(r5: dict[str, Any], rows: list[Row], seeds: list[int]) -> Claim:
    per_host = {h: 100 * v["mape_held_out"] for h, v in r5.items()}
    live: dict[str, list[float]] = {}
    for r in rows:
        if r["arm"] == "edgegossip":
            for host, v in (r.get("predictor_mape_by_host") or {}).items():
                if v is not None:
                    live.setdefault(str(host), []).append(100 * v)
    worst = max(per_host.values(), default=None)
    return claim(
        "R-EG-5",
        "predictor error per emulated host (held-out MAPE of the step time)",
        PAPER["mape"],
        list(per_host.values()),
        "%",
        [],
        worst is not None and worst <= 10.0,
        "load from edgetrain's CPU+disk load generator at 13 levels inside each host's cgroup "
        "(the paper: WordCount/Sort on a VM); each level held out in turn",
        per_host=per_host,
        in_run_throughput_mape={h: median(v) for h, v in live.items()},
    )


def _contention_claim(cid: str, scenario: str, rows: list[Row], seeds: list[int]) -> Claim:
    def disturbed_spread(r: Row) -> float | None:
        d = r.get("disturbance") or {}
        spreads = r.get("spreads") or []
        window = spreads[d.get("from_epoch", 0) : d.get("to_epoch", 0) + 1]
        return median(window)

    def first_after(r: Row) -> float | None:
        d, spreads = r.get("disturbance") or {}, r.get("spreads") or []
        i = d.get("from_epoch", 0) + 1  # the first epoch balanced on a loaded epoch
        return spreads[i] if i < len(spreads) else None

    by = {arm: [r for r in rows if r["arm"] == arm] for arm in BALANCES}
    spread = {a: median([disturbed_spread(r) for r in v]) for a, v in by.items()}
    first = {a: median([first_after(r) for r in v]) for a, v in by.items()}
    times = {a: median([r["train_s"] for r in v]) for a, v in by.items()}
    agrees = None
    pred, react, static = (spread[a] for a in BALANCES)
    if pred is not None and react is not None and static is not None:
        agrees = static >= max(pred, react)  # static is worst
        if scenario == "load":  # and the predictor is no worse right after the change
            agrees = agrees and (first["eg-predictive"] or 0) <= (first["eg-reactive"] or 0) * 1.05
    text = (
        "co-running load inside gpu-a's cgroup (visible in /proc)"
        if scenario == "load"
        else "gpu-a's CPU quota cut to 0.3 (invisible to /proc)"
    )
    return claim(
        cid,
        f"{text}: finish-time spread while disturbed, predictive balance",
        "predictor beats reactive after the change; static worst (no figure)",
        [disturbed_spread(r) for r in by["eg-predictive"]],
        "x",
        seeds,
        agrees,
        "the paper shows no such experiment; our forecast is the last epoch's mean contention",
        spread_while_disturbed=spread,
        first_epoch_after=first,
        train_s=times,
    )
