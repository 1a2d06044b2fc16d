"""Mercury's claims R-M1 .. R-M9 from a reproduction's rows, and the report's text. Pure.

Each claim is our median with min and max over seeds beside the paper's figure; a claim the
mode did not run is listed as not measured, with the reason, never left out or guessed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import PurePath
from typing import Any

from edgetrain.ps.mercury.speedup import predicted
from edgetrain.reproduce import report
from edgetrain.reproduce.mercury_plan import R_M3, Plan

PAPER = {
    "speedup": "1.85-4.08",  # Fig. 11, over datasets; CIFAR-10 3.74
    "all_is_wall": 4.2,  # Fig. 13: group-wise 4.2x faster than All-IS
    "all_is_iterations": 1.2,  # Fig. 13: group-wise needs 20% more iterations
    "reshard_pp": 1.84,  # Fig. 14
    "bacc_wall": 2.2,  # Fig. 15
    "bacc_iterations": 1.05,  # Fig. 15
    "adaptation": round(3.74 / 3.43, 3),  # Fig. 16 at the first bandwidth
    "federated": {"10": 2.75, "1": 2.5, "0.5": 2.41},  # Fig. 18
    "premises": {"1-5": 50.0, "1-10": 70.0, "10-10": 65.0},  # Fig. 6, %
}
CALIBRATION = (
    "**Calibration, before any number** (shared/specs/ps.md Appendix A, on this machine: "
    "LeNet-5 on the MNIST test set 8k/2k, 4 simulated workers, batch 32, Adam 1e-3, seeds "
    "1-3). Uniform sampling needed median 440 / 940 iterations to 97% / 98%; group-wise "
    "importance sampling 380 / 620, so E/E_is is about 1.16x at 97% and 1.5x at 98%, with one "
    "bad seed; All-IS was not better than group-wise. **Expect a speed-up of about 1.1-1.6x "
    "here, not the paper's 3.74x** (CIFAR-10 on ResNet-18); the targets were fixed by the "
    "pilot before the measured runs and not tuned afterwards."
)


def _median(xs: Sequence[Any]) -> float | None:
    vals = [float(x) for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return statistics.median(vals) if vals else None


def _ratio(a: Any, b: Any) -> float | None:
    ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0
    return float(a) / float(b) if ok else None


def _by(rows: Sequence[dict[str, Any]], arm: str) -> dict[int, dict[str, Any]]:
    return {r["seed"]: r for r in rows if r["arm"] == arm}


def paired(rows: Sequence[dict[str, Any]], num: str, den: str, key: str) -> list[float | None]:
    """Per seed: arm ``num``'s ``key`` over arm ``den``'s (None where either is missing)."""
    a, b = _by(rows, num), _by(rows, den)
    return [_ratio(a[s].get(key), b[s].get(key)) for s in sorted(set(a) & set(b))]


def diff_pp(rows: Sequence[dict[str, Any]], a: str, b: str) -> list[float | None]:
    """Per seed: final accuracy of ``a`` minus that of ``b``, in points."""
    x, y = _by(rows, a), _by(rows, b)
    out: list[float | None] = []
    for s in sorted(set(x) & set(y)):
        fa, fb = x[s].get("final_accuracy"), y[s].get("final_accuracy")
        out.append(100 * (fa - fb) if fa is not None and fb is not None else None)
    return out


def _all(values: Sequence[float | None], test: Callable[[float], bool]) -> bool | None:
    """Whether every seed passes (a seed without a value fails); None: nothing measured."""
    if not any(v is not None for v in values):
        return None
    return all(v is not None and test(v) for v in values)


def _at_least(bound: float) -> Callable[[float], bool]:
    return lambda v: v >= bound


def _seeds(rows: Sequence[dict[str, Any]]) -> list[int]:
    return sorted({int(r["seed"]) for r in rows})


def not_measured(cid: str, text: str, paper: Any, unit: str, why: str) -> report.Claim:
    return report.Claim(cid, text, paper, None, unit, [], None, f"not measured: {why}")


def _claim(
    cid: str,
    text: str,
    paper: Any,
    values: Sequence[float | None],
    unit: str,
    seeds: list[int],
    agrees: bool | None,
    deviations: str,
    **details: Any,
) -> report.Claim:
    stat = report.Stat.of(values)
    if stat is None:
        deviations = f"not reached in any seed (within the budget); {deviations}"
    else:
        deviations = report.missing_values(values) + deviations
    return report.Claim(cid, text, paper, stat, unit, seeds, agrees, deviations, details)


def scale_text(p: Plan) -> str:
    where = (
        "local processes without link limits"
        if p.local
        else "4 emulated devices at 0.45 core on one 2-core machine"
    )
    data = (
        "digits (1,437/360; saturates near 98%)"
        if p.dataset == "digits"
        else "the MNIST test set (8,000/2,000; MNIST saturates near 99%)"
    )
    return f"{p.model} on {data} on {where} instead of CIFAR-10/ResNet-18 on 4 Jetson TX1"


def _skip_why(p: Plan, exp: str) -> str:
    if exp == "R-M5" and p.local:
        return "the ±10% trace needs the emulated testbed (--testbed emulated, root)"
    mode = "--smoke" if p.budget < 100 else "--quick" if p.dataset == "digits" else "this mode"
    return f"{mode} runs R-M1 only; run the default mode for {exp}"


# ------------------------------------------------------------------ each claim


def r_m1(res: dict[str, Any], p: Plan) -> list[report.Claim]:
    out = []
    speed: dict[int, float | None] = {}
    for bw in p.bandwidths:
        rows = res["r_m1"].get(str(bw), [])
        sp = paired(rows, "uniform", "mercury", "time_to_primary")
        e = paired(rows, "uniform", "mercury", "iterations_to_primary")
        speed[bw] = _median(sp)
        label = "local processes" if p.local else f"{bw} Mbit/s"
        out.append(
            _claim(
                "R-M1",
                f"Mercury's speed-up over uniform multi-PS SGD to {_pct(res, 'primary')} ({label})",
                PAPER["speedup"],
                sp,
                "x",
                _seeds(rows),
                _all(sp, lambda v: v > 1),
                f"{scale_text(p)}; expected 1.1-1.6x (calibration), not 3.74x",
                iterations_ratio=report.Stat.of(e),
            )
        )
        second = paired(rows, "uniform", "mercury", "time_to_secondary")
        out.append(
            _claim(
                "R-M1s",
                f"the same at the secondary target {_pct(res, 'secondary')} ({label})",
                PAPER["speedup"],
                second,
                "x",
                _seeds(rows),
                _all(second, lambda v: v > 1),
                "the calibration expects a smaller gain at the lower target (1.16x at 97%)",
            )
        )
    lo, hi = min(p.bandwidths), max(p.bandwidths)
    if lo == hi:
        out.append(
            not_measured(
                "R-M1t",
                "speed-up at the lowest bandwidth over that at the highest",
                "> 1 (largest gain at 10 Mbit/s)",
                "x",
                "one bandwidth in this mode",
            )
        )
    else:
        trend = _ratio(speed[lo], speed[hi])
        out.append(
            _claim(
                "R-M1t",
                f"speed-up at {lo} Mbit/s over that at {hi} Mbit/s (medians)",
                "> 1 (largest gain at 10 Mbit/s)",
                [trend],
                "x",
                list(p.seeds),
                trend > 1 if trend is not None else None,
                "the calibration predicts a flat or reversed trend here (the anytime refresh "
                "at 10 Mbit/s is close to All-IS, which did not help); reported as measured",
            )
        )
    return out


def r_m2(rows: list[dict[str, Any]], p: Plan) -> list[report.Claim]:
    wall = paired(rows, "all-is", "groupwise", "time_to_primary")
    its = paired(rows, "groupwise", "all-is", "iterations_to_primary")
    note = "both without resharding; All-IS re-scores every local sample each iteration"
    return [
        _claim(
            "R-M2",
            "All-IS time to target over group-wise (group-wise faster by)",
            PAPER["all_is_wall"],
            wall,
            "x",
            _seeds(rows),
            _all(wall, lambda v: v > 1),
            note,
        ),
        _claim(
            "R-M2b",
            "group-wise iterations to target over All-IS",
            PAPER["all_is_iterations"],
            its,
            "x",
            _seeds(rows),
            _all(its, lambda v: v >= 1),
            note + "; the calibration found All-IS no better (expect about 1 or below)",
        ),
    ]


def r_m3(rows: list[dict[str, Any]], p: Plan) -> list[report.Claim]:
    seeds = _seeds(rows)
    gain = diff_pp(rows, "rs-agnostic", "rs-none")
    aware = diff_pp(rows, "rs-aware", "rs-agnostic")
    control = diff_pp(rows, "rs-aware", "rs-random")
    share = paired(rows, "rs-aware", "rs-agnostic", "reshard_bytes")
    ok_share = _all(share, lambda v: v <= 0.6)
    ok_acc = _all(aware, lambda v: v >= -0.5)
    fixed = f"Dirichlet 0.5 start, fixed budget of {p.budget} iterations, final accuracy"
    return [
        _claim(
            "R-M3",
            "resharding (agnostic, N_p) over none: accuracy gained",
            PAPER["reshard_pp"],
            gain,
            "pp",
            seeds,
            _all(gain, lambda v: v > 0),
            fixed,
        ),
        _claim(
            "R-M3b",
            "aware resharding (N_o = N_p/2) against agnostic (N_p): accuracy",
            "0 (same accuracy at 50% of the bytes)",
            aware,
            "pp",
            seeds,
            None if ok_acc is None or ok_share is None else ok_acc and ok_share,
            fixed + "; agrees when within 0.5 points with at most 60% of the bytes",
        ),
        _claim(
            "R-M3c",
            "aware against the random control with the same budget: accuracy",
            None,
            control,
            "pp",
            seeds,
            None,
            "the control the paper lacks: without it, aware cannot be told from less data",
        ),
        _claim(
            "R-M3d",
            "bytes moved by aware resharding over agnostic",
            0.5,
            share,
            "x",
            seeds,
            ok_share,
            "resharding bytes of all devices"
            + report.above_bound(share, 0.55, "aware sends N_o = N_p/2 samples a round"),
        ),
    ]


def r_m4(rows: list[dict[str, Any]], bacc: list[dict[str, Any]], p: Plan) -> list[report.Claim]:
    both = rows + [r for r in bacc if r["arm"] == "mercury"]
    wall = paired(both, "sequential", "mercury", "time_to_primary")
    its = paired(both, "mercury", "sequential", "iterations_to_primary")
    note = f"at {p.home} Mbit/s; the BACC side is R-M1's Mercury run at that bandwidth"
    return [
        _claim(
            "R-M4",
            "sequential pipeline's time to target over BACC's",
            PAPER["bacc_wall"],
            wall,
            "x",
            _seeds(rows),
            _all(wall, lambda v: v > 1),
            note,
        ),
        _claim(
            "R-M4b",
            "BACC's iterations to target over the sequential pipeline's",
            PAPER["bacc_iterations"],
            its,
            "x",
            _seeds(rows),
            None,
            note + "; BACC scores with one-iteration-stale weights",
        ),
    ]


def bacc_share(res: dict[str, Any], p: Plan) -> report.Claim:
    rows = [r for rs in res["r_m1"].values() for r in rs if r["arm"] == "mercury"]
    share = [
        100 * r["t_is_s"] / (r["t_cp_s"] + r["t_cm_s"])
        if r.get("t_is_s") is not None and (r.get("t_cp_s") or 0) + (r.get("t_cm_s") or 0) > 0
        else None
        for r in rows
    ]
    return _claim(
        "R-M4c",
        "BACC hides importance computation: T_is / (T_cp + T_cm), every R-M1 bandwidth",
        "about 0 (goal: under 10%)",
        share,
        "%",
        _seeds(rows),
        _all(share, lambda v: v < 10),
        "T_is is everything in an iteration that is neither compute nor aggregation "
        "(drawing the batch, placing received samples, waiting for T2 before the step)",
    )


def r_m5(rows: list[dict[str, Any]], p: Plan) -> list[report.Claim]:
    gain = paired(rows, "bw-agnostic", "mercury", "time_to_primary")
    return [
        _claim(
            "R-M5",
            f"under the ±10% trace at {p.home} Mbit/s: bandwidth-agnostic time over adaptive",
            PAPER["adaptation"],
            gain,
            "x",
            _seeds(rows),
            _all(gain, lambda v: v > 1),
            "paper: 3.74x adaptive vs 3.43x agnostic speed-up, a small gain that seed noise "
            "can hide at this scale",
        )
    ]


def r_m6(groups: dict[str, list[dict[str, Any]]], p: Plan) -> list[report.Claim]:
    out = []
    fed = PAPER["federated"]
    assert isinstance(fed, dict)
    for alpha, rows in groups.items():
        sp = paired(rows, "fed-uniform", "fed-mercury", "time_to_primary")
        out.append(
            _claim(
                "R-M6",
                f"federated speed-up, Dirichlet alpha {alpha} (no resharding, no BACC)",
                fed.get(alpha),
                sp,
                "x",
                _seeds(rows),
                _all(sp, lambda v: v > 1),
                "4 devices, not 12; targets of the IID pilot",
            )
        )
    return out


def r_m7(rows: list[dict[str, Any]], p: Plan) -> list[report.Claim]:
    probes = [q for r in rows for q in r.get("premises") or []]
    prem = PAPER["premises"]
    assert isinstance(prem, dict)

    def share(lag: int, key: str) -> list[float | None]:
        return [100 * q[key] for q in probes if q.get("lag") == lag and key in q]

    top = [100 * q["top10_share"] for q in probes if q.get("lag") == 0 and "top10_share" in q]
    bound = "a share of samples is at most 100%"
    out = []
    for cid, lag, key, label in (
        ("R-M7", 1, "under_5pct", "1-5"),
        ("R-M7b", 1, "under_10pct", "1-10"),
        ("R-M7c", 10, "under_10pct", "10-10"),
    ):
        vals: list[float | None] = list(share(lag, key))
        want = 0.8 * prem[label]
        pct = key.split("_")[1].replace("pct", "%")
        out.append(
            _claim(
                cid,
                f"samples whose loss rank moves < {pct} after {lag} iteration(s)",
                prem[label],
                vals,
                "%",
                _seeds(rows),
                _all(vals, _at_least(want)),
                "uniform training, 500 samples of device 0 probed at several iterations; "
                "agrees when at least 80% of the paper's share"
                + report.above_bound(vals, 100.0, bound),
            )
        )
    out.append(
        _claim(
            "R-M7d",
            "share of the total loss held by the top 10% of samples",
            "concentrates after ~200 iterations (Fig. 3)",
            top,
            "%",
            _seeds(rows),
            _all(top, lambda v: v > 10),
            "over the probed iterations" + report.above_bound(top, 100.0, bound),
        )
    )
    return out


def r_m8(res: dict[str, Any], p: Plan) -> report.Claim:
    ratios: list[float | None] = []
    rows_out: list[dict[str, Any]] = []
    for bw in p.bandwidths:
        rows = res["r_m1"].get(str(bw), [])
        base, merc = _by(rows, "uniform"), _by(rows, "mercury")
        for s in sorted(set(base) & set(merc)):
            b, m = base[s], merc[s]
            measured = _ratio(b.get("time_to_primary"), m.get("time_to_primary"))
            pred: float | None = None
            e, e_is = b.get("iterations_to_primary"), m.get("iterations_to_primary")
            terms = [m.get(k) for k in ("t_cp_s", "t_cm_s", "t_is_s")]
            if e and e_is and all(isinstance(t, (int, float)) for t in terms):
                t_cp, t_cm, t_is = (float(t or 0.0) for t in terms)
                pred = predicted(float(e), float(e_is), t_cp, t_cm, t_is)
            ratios.append(_ratio(pred, measured))
            per_it = [sum(float(r.get(k) or 0.0) for k in ("t_cp_s", "t_cm_s")) for r in (b, m)]
            rows_out.append(
                {
                    "bandwidth": bw,
                    "seed": s,
                    "predicted": pred,
                    "measured": measured,
                    "cp_cm_mercury_over_uniform": _ratio(per_it[1], per_it[0]),
                }
            )
    inflation = _median([r["cp_cm_mercury_over_uniform"] for r in rows_out])
    return _claim(
        "R-M8",
        "speed-up model (Eq. 5, Mercury's measured T_cp, T_cm, T_is; E, E_is from R-M1) over "
        "the measured speed-up",
        "agree (Eq. 5)",
        ratios,
        "x",
        sorted({int(r["seed"]) for r in rows_out}),
        _all(ratios, lambda v: 0.9 <= v <= 1.1),
        "'yes' when the two agree within 10% at every seed; Eq. 5 assumes Mercury's "
        "T_cp + T_cm equal the baseline's: here "
        f"they are {_f(inflation, '.2f')}x the baseline's (median), which the model leaves out",
        rows=rows_out,
    )


def build(res: dict[str, Any], p: Plan) -> list[report.Claim]:
    """Every claim R-M1 .. R-M9, measured or listed as not measured with the reason."""
    out = r_m1(res, p)
    if "r_m2" in res:
        out += r_m2(res["r_m2"], p)
    else:
        out.append(
            not_measured(
                "R-M2",
                "All-IS time to target over group-wise",
                PAPER["all_is_wall"],
                "x",
                _skip_why(p, "R-M2"),
            )
        )
    if "r_m3" in res:
        out += r_m3(res["r_m3"], p)
    else:
        out.append(
            not_measured(
                "R-M3",
                "resharding over none: accuracy gained",
                PAPER["reshard_pp"],
                "pp",
                _skip_why(p, "R-M3"),
            )
        )
    if "r_m4" in res:
        out += r_m4(res["r_m4"], res["r_m1"].get(str(p.home), []), p)
    else:
        out.append(
            not_measured(
                "R-M4",
                "sequential pipeline's time to target over BACC's",
                PAPER["bacc_wall"],
                "x",
                _skip_why(p, "R-M4"),
            )
        )
    out.append(bacc_share(res, p))
    if "r_m5" in res:
        out += r_m5(res["r_m5"], p)
    else:
        out.append(
            not_measured(
                "R-M5",
                "bandwidth-agnostic time over adaptive under ±10%",
                PAPER["adaptation"],
                "x",
                _skip_why(p, "R-M5"),
            )
        )
    if "r_m6" in res:
        out += r_m6(res["r_m6"], p)
    else:
        out.append(
            not_measured(
                "R-M6",
                "federated speed-up, Dirichlet 10 / 1 / 0.5",
                "2.75 / 2.5 / 2.41",
                "x",
                _skip_why(p, "R-M6"),
            )
        )
    if "r_m7" in res:
        out += r_m7(res["r_m7"], p)
    else:
        out.append(
            not_measured(
                "R-M7",
                "samples whose loss rank moves < 5% after 1 iteration",
                50.0,
                "%",
                _skip_why(p, "R-M7"),
            )
        )
    out.append(r_m8(res, p))
    out.append(
        not_measured(
            "R-M1b",
            "TicTac-like overlap and AdaComm-like local-SGD baselines",
            "TicTac 1.01-1.21x, AdaComm 1.21-1.88x",
            "x",
            "optional in the specification; edgetrain has no WFBP or local-SGD variant of the "
            "multi-PS layout yet",
        )
    )
    out.append(
        not_measured(
            "R-M9",
            "scaling to 8 devices",
            "speed-up kept (Fig. 17)",
            "x",
            "optional; 8 devices at 0.22 core exceed what this 2-core machine measures honestly",
        )
    )
    return out


# ------------------------------------------------------------------ report text


def _pct(res: dict[str, Any], name: str) -> str:
    t = res.get("targets", {}).get(name)
    return f"{100 * t:.1f}%" if isinstance(t, (int, float)) else "the target"


def _f(x: Any, fmt: str = ".3g") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def _stat(values: Sequence[Any], fmt: str = ".3g") -> str:
    s = report.Stat.of([v for v in values if isinstance(v, (int, float))])
    return f"{_f(s.median, fmt)} [{_f(s.min, fmt)}, {_f(s.max, fmt)}]" if s else "-"


def side_by_side(res: dict[str, Any], p: Plan) -> str:
    """One row per bandwidth and method: iterations and time to target, speed-up and its ratio
    to the paper's 3.74x, final accuracy."""
    lines = [
        "| Mbit/s | method | iterations to target | time to target s | speed-up | of paper's "
        "3.74x | final acc. | T_cp / T_cm / T_is s | reshard MB |",
        "|---:|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for bw, rows in res["r_m1"].items():
        for arm in ("uniform", "mercury"):
            mine = [r for r in rows if r["arm"] == arm]
            sp = paired(rows, "uniform", arm, "time_to_primary")
            rel = [v / 3.74 if v is not None and arm != "uniform" else None for v in sp]
            terms = " / ".join(
                _f(_median([r.get(k) for r in mine]), ".4f") for k in ("t_cp_s", "t_cm_s", "t_is_s")
            )
            mb = [r["reshard_bytes"] / 1e6 for r in mine if r.get("reshard_bytes") is not None]
            lines.append(
                f"| {'local' if p.local else bw} | {arm} | "
                f"{_stat([r.get('iterations_to_primary') for r in mine], '.0f')} | "
                f"{_stat([r.get('time_to_primary') for r in mine], '.1f')} | {_stat(sp)} | "
                f"{_stat(rel, '.2f')} | {_stat([r.get('final_accuracy') for r in mine], '.4f')} "
                f"| {terms} | {_stat(mb, '.2f')} |"
            )
    lines += [
        "",
        f"Target {_pct(res, 'primary')} (secondary {_pct(res, 'secondary')}); median [min, max] "
        "over seeds; times are training seconds (evaluation excluded), from `edgetrain "
        "compare`'s clock. Runs stop at the target.",
    ]
    return "\n".join(lines)


def arms_table(rows: list[dict[str, Any]], arms: Sequence[str]) -> str:
    lines = [
        "| arm | seeds | iterations to target | time to target s | final acc. | reshard MB | "
        "cohort | T_is s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for arm in arms:
        mine = [r for r in rows if r["arm"] == arm]
        if not mine:
            continue
        mb = [r["reshard_bytes"] / 1e6 for r in mine if r.get("reshard_bytes") is not None]
        lines.append(
            f"| {arm} | {', '.join(str(r['seed']) for r in mine)} | "
            f"{_stat([r.get('iterations_to_primary') for r in mine], '.0f')} | "
            f"{_stat([r.get('time_to_primary') for r in mine], '.1f')} | "
            f"{_stat([r.get('final_accuracy') for r in mine], '.4f')} | {_stat(mb, '.2f')} | "
            f"{_stat([r.get('cohort_mean') for r in mine], '.0f')} | "
            f"{_stat([r.get('t_is_s') for r in mine], '.4f')} |"
        )
    return "\n".join(lines)


def setup_text(res: dict[str, Any], p: Plan) -> str:
    where = (
        "local processes (no link limits: the bandwidth label is nominal)"
        if p.local
        else "the emulated testbed mercury-4u (4 devices at 0.45 core, each on its own access "
        "link, all links at one rate per batch)"
    )
    data = (
        "scikit-learn digits (1,437 train / 360 test; smoke and quick only)"
        if p.dataset == "digits"
        else "the MNIST test set split 8,000 train / 2,000 test (2,000 a device when IID)"
    )
    reduced = (
        f"Reduced from the specification to fit this 2-core machine: {len(p.seeds)} measured "
        f"seed(s) (spec: 3), a budget of {p.budget} iterations a run, R-M2 .. R-M7 at "
        f"{p.home} Mbit/s only (spec: R-M2 and R-M4 also at 10 Mbit/s), R-M7 on one seed, no "
        "beta = 0 run, cnn2 not run."
    )
    return (
        f"{p.model} on {data}, on {where}; Adam, local batch {p.batch}, learning rate "
        f"{_f(res.get('lr'))} (chosen by the pilot from {', '.join(f'{x:g}' for x in p.lrs)}); "
        f"evaluation every {p.every} iterations on device 0 (replicas are identical: hash "
        f"checked), outside the training clock. Bandwidths {', '.join(map(str, p.bandwidths))} "
        f"Mbit/s; measured seeds {', '.join(map(str, p.seeds))}, pilot seed {p.pilot_seed}. "
        "Every arm differs from the baseline (multips-sgd) only in the technique and its "
        "[mercury] keys; Mercury's defaults: d = 2, beta = 1/D_eff, lambda = 0.5, anytime "
        "refresh, aware resharding with the bandwidth budget once per local epoch. "
        f"{reduced if p.dataset != 'digits' else ''} "
        f"{'MNIST saturates near 99%' if p.dataset == 'mnist' else 'Digits saturates near 98%'}"
        ", which limits how many fewer iterations are possible; the paper's CIFAR-scale "
        "speed-ups are not expected here."
    ).replace("  ", " ")


def sections(res: dict[str, Any], p: Plan) -> list[tuple[str, str]]:
    out = [
        ("Setup", setup_text(res, p)),
        ("R-M1: side by side (and R-M8's terms)", side_by_side(res, p)),
    ]
    if "r_m2" in res:
        out.append(
            ("R-M2: group-wise against All-IS", arms_table(res["r_m2"], ("groupwise", "all-is")))
        )
    if "r_m3" in res:
        out.append(
            (
                "R-M3: resharding on a Dirichlet 0.5 start (fixed budget)",
                arms_table(res["r_m3"], R_M3),
            )
        )
    if "r_m4" in res:
        bacc = [r for r in res["r_m1"].get(str(p.home), []) if r["arm"] == "mercury"]
        out.append(
            (
                "R-M4: BACC against sequential",
                arms_table(res["r_m4"] + bacc, ("mercury", "sequential")),
            )
        )
    if "r_m5" in res:
        out.append(
            ("R-M5: under the ±10% trace", arms_table(res["r_m5"], ("mercury", "bw-agnostic")))
        )
    for alpha, rows in (res.get("r_m6") or {}).items():
        out.append(
            (f"R-M6: federated, alpha {alpha}", arms_table(rows, ("fed-uniform", "fed-mercury")))
        )
    if "r_m7" in res:
        out.append(("R-M7: premises (probes)", premises_table(res["r_m7"])))
    for name, text in res.get("testbeds", {}).items():
        out.append((f"Testbed verification: {name}", text))
    if res.get("pilot"):
        out.append((f"Pilot (seed {p.pilot_seed}, not reused)", pilot_table(res["pilot"])))
    return out


def premises_table(rows: list[dict[str, Any]]) -> str:
    """R-M7's probes, one line per run and probed iteration: the top 10%'s share of the loss
    (lag 0) and the share of samples whose loss rank moved less than 5% / 10% after 1 and 10
    iterations."""
    lines = [
        "Shares of 500 probed samples of device 0 under uniform training, in %.",
        "",
        "| seed | iteration | top 10%'s loss share | rank moves < 5% / < 10%, 1 it. "
        "| rank moves < 5% / < 10%, 10 it. |",
        "|---:|---:|---:|---:|---:|",
    ]

    def pct(q: dict[str, Any] | None, key: str) -> str:
        return "-" if q is None or q.get(key) is None else f"{100 * q[key]:.1f}"

    for r in rows:
        probes = r.get("premises") or []
        for it in sorted({q["iteration"] for q in probes}):
            at = {q["lag"]: q for q in probes if q["iteration"] == it}
            lag1, lag10 = at.get(1), at.get(10)
            lines.append(
                f"| {r.get('seed')} | {it} | {pct(at.get(0), 'top10_share')} "
                f"| {pct(lag1, 'under_5pct')} / {pct(lag1, 'under_10pct')} "
                f"| {pct(lag10, 'under_5pct')} / {pct(lag10, 'under_10pct')} |"
            )
    return "\n".join(lines)


def pilot_table(pilot: dict[str, Any]) -> str:
    """The pilot's runs, one per learning rate tried (their accuracy curves stay in the JSON
    report), and what it fixed: the learning rate and the targets."""
    lines = [
        "Each run's accuracy curve is in `paper-vs-edgetrain.json`.",
        "",
        "| run | learning rate | final accuracy | train s |",
        "|---|---:|---:|---:|",
    ]
    for t in pilot.get("tried") or []:
        name = PurePath(str(t.get("run"))).name
        lines.append(
            f"| {name} | {_f(t.get('lr'), 'g')} | {_f(t.get('final_accuracy'), '.4f')} "
            f"| {_f(t.get('train_s'), '.1f')} |"
        )
    targets = pilot.get("targets") or {}
    lines += [
        "",
        f"Chosen: learning rate {_f(pilot.get('lr'), 'g')}; targets "
        f"{_f(targets.get('primary'), '.3f')} (primary) and "
        f"{_f(targets.get('secondary'), '.3f')} (secondary), fixed before any measured run.",
    ]
    return "\n".join(lines)


def calibration_text(p: Plan) -> str:
    return CALIBRATION


def plan_dict(p: Plan) -> dict[str, Any]:
    d = asdict(p)
    d["experiments"] = sorted(p.experiments)
    return d
