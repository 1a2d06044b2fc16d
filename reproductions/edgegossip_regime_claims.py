"""The EdgeGossip reproduction's regime map, measured against its prediction: per setting of
``OUT/regime.json`` that ran, EdgeGossip's per-epoch speed-up over epoch-synchronous GoSGD
predicted beside measured, the cost model's error over every run it predicted (goal 15%, a
line for each miss above 30%), and R-EG-6: the heavier model's and the platform count's effect,
measured where the runs exist and predicted beside. Pure.

Which runs stand for which setting: R-EG-1's and R-EG-3's for the plan's model on
``edgegossip-4``, R-EG-2's for it on each imbalance testbed, R-EG-6's for the heavier model on
``edgegossip-4`` and for the plan's model on each scale testbed (the pilots and R-EG-7's
disturbed runs are left out). A run's measured time per epoch is its training time over its
epochs, as the model predicts it: the aggregation before ``start`` is in neither, the
evaluations are out of the clock, the first epoch's warm-up is in the measurement only."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from edgetrain.experiment.claims import Row, number
from edgetrain.experiment.claims import prediction_errors as errors_of
from edgetrain.experiment.report import Claim, Stat, above_bound
from edgetrain.experiment.text import fmt, written_by
from reproductions.edgegossip_plan import scale_bed

GOAL_ERROR = 0.15  # issue 27: median |measured / predicted - 1| over every run predicted
MISS = 0.30  # a run missed by more than this gets a line
GAIN = 1.1  # a per-epoch speed-up of this or more is a gain (predicted or measured)
BASE = "gosgd-sync"
UNMEASURED_ARMS = ("gosgd-sync", "edgegossip", "gosgd-async", "eg-random")  # shown where none ran


def epoch_s(row: Mapping[str, Any]) -> float | None:
    """A run's measured training seconds per epoch (None: not known)."""
    train, epochs = number(row.get("train_s")), number(row.get("epochs"))
    return train / epochs if train and epochs else None


def plan_model(regime: Mapping[str, Any]) -> str | None:
    """The model the plan's runs train (the map's first)."""
    models = regime.get("models") or []
    return str(models[0]) if models else None


def setting_rows(res: Mapping[str, Any]) -> dict[str, list[Row]]:
    """The measured rows of every setting of the map that ran, by the map's key."""
    regime = res.get("regime") or {}
    settings = regime.get("settings") or {}
    model = plan_model(regime)
    out: dict[str, list[Row]] = {}

    def add(key: str, rows: Sequence[Row]) -> None:
        if key in settings and rows:
            out.setdefault(key, []).extend(rows)

    add(f"{model}@edgegossip-4", [*(res.get("r_eg_1") or []), *(res.get("r_eg_3") or [])])
    for k, rows in (res.get("r_eg_2") or {}).items():
        add(f"{model}@eg-imb{k}", rows)
    six = res.get("r_eg_6") or {}
    if six.get("model"):
        add(f"{six['model']}@edgegossip-4", six.get("runs") or [])
    for n, rows in (six.get("scale") or {}).items():
        add(f"{model}@{scale_bed(int(n))}", rows)
    return out


def measured_speedups(rows: Sequence[Row], arm: str = "edgegossip") -> dict[int, float]:
    """Per seed, how many times faster per epoch ``arm`` trained than epoch-synchronous
    GoSGD."""
    mine = {r["seed"]: epoch_s(r) for r in rows if r["arm"] == arm}
    base = {r["seed"]: epoch_s(r) for r in rows if r["arm"] == BASE}
    return {s: b / a for s, a in sorted(mine.items()) if a and (b := base.get(s))}


def measured_heterogeneity(rows: Sequence[Row]) -> dict[int, float]:
    """Per seed, the heterogeneity epoch-synchronous GoSGD measured on the setting: its median
    finish-time spread (the slowest worker's epoch time over the fastest's)."""
    out: dict[int, float] = {}
    for r in rows:
        if r["arm"] == BASE and (v := number(r.get("spread_median"))) is not None:
            out[r["seed"]] = v
    return out


SHARE = "the fastest/slowest CPU share, gossip.md 0.3"


def bound_note(
    seeds: Sequence[int], vals: Sequence[float], share: float, measured: Mapping[int, float]
) -> str:
    """The deviation note for speed-ups above the testbed's CPU-share ratio (the bound of
    gossip.md 0.3). A value within what GoSGD measured on the same seed (its slowest over its
    fastest worker's epoch) is noted as such: the slow hosts computed less than their CPU share
    (a quota's stops, a burst pace), which the share does not see. Only a value above both is
    a measuring error."""
    above = [(s, v) for s, v in zip(seeds, vals, strict=True) if v > share]
    within = [v for s, v in above if (m := measured.get(s)) is not None and v <= m]
    beyond = [v for s, v in above if (m := measured.get(s)) is None or v > m]
    note = ""
    if within:
        note += (
            f"; {len(within)} value(s) above {share:g} ({SHARE}) but within GoSGD's measured "
            f"heterogeneity on the same seed (largest {max(within):.3g}): the slow hosts "
            "computed less than their share"
        )
    if beyond:
        why = SHARE + (", and GoSGD's measured heterogeneity on the same seed" if measured else "")
        note += above_bound(beyond, share, why)
    return note


def prediction_errors(res: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every measured run whose arm the map predicted: measured / predicted - 1 of its time per
    epoch."""
    settings = (res.get("regime") or {}).get("settings") or {}
    return errors_of(settings, setting_rows(res), "epoch_s", epoch_s)


def regime_claims(res: Mapping[str, Any]) -> list[Claim]:
    """One claim per measured setting with both arms (the side of the gain the model predicted
    against the measured one, every seed) and the model's error over every run it
    predicted."""
    regime = res.get("regime") or {}
    settings = regime.get("settings") or {}
    after = "" if regime.get("before_measured_runs", True) else _AFTER
    out = []
    for key, rows in setting_rows(res).items():
        pred = number(settings[key].get("speedup"))
        got = measured_speedups(rows)
        if not got or pred is None:
            continue
        seeds = sorted(got)
        vals = [got[s] for s in seeds]
        gain = pred >= GAIN
        het = number(settings[key].get("heterogeneity"))
        over = bound_note(seeds, vals, het, measured_heterogeneity(rows)) if het else ""
        out.append(
            Claim(
                f"R-EG-R {key}",
                f"regime map: EdgeGossip's speed-up per epoch over epoch-synchronous GoSGD on "
                f"{key} (predicted {pred:.2f}x before the runs; the side of {GAIN:g}x is the "
                "claim)",
                f">= {GAIN:g}x" if gain else f"< {GAIN:g}x",
                Stat.of(vals),
                "x",
                seeds,
                all((v >= GAIN) == gain for v in vals),
                f"predicted {pred:.2f}x (heterogeneity "
                f"{settings[key].get('heterogeneity', 0.0):.1f}x); time per epoch, not to a "
                f"target{over}{after}",
                {"predicted": pred, "per_seed": dict(zip(seeds, vals, strict=True))},
            )
        )
    errors = prediction_errors(res)
    if errors:
        out.append(error_claim(errors, after))
    return out


_AFTER = "; **the map was written after measured runs existed** (a resumed older reproduction)"


def error_claim(errors: Sequence[Mapping[str, Any]], after: str = "") -> Claim:
    """The cost model's error over every run it predicted, each miss above 30% named."""
    vals = [abs(e["error"]) for e in errors]
    med = statistics.median(vals)
    misses = [e for e in errors if abs(e["error"]) > MISS]
    missed = (
        f"; {len(misses)} of {len(errors)} runs missed by more than {MISS:.0%}: "
        + ", ".join(f"{e['arm']} s{e['seed']} on {e['setting']} {e['error']:+.0%}" for e in misses)
        if misses
        else f"; no run missed by more than {MISS:.0%}"
    )
    return Claim(
        "R-EG-RE",
        "cost model: |measured / predicted - 1| of the time per epoch over every run it "
        f"predicted ({len(vals)} runs; median over runs, not seeds)",
        f"<= {GOAL_ERROR:g}",
        Stat.of(vals),
        "",
        sorted({e["seed"] for e in errors}),
        med <= GOAL_ERROR,
        "the profiles were measured on one emulated host before the runs; the model takes the "
        "balancer's shares to be exact (a measured epoch waits for the slowest worker's "
        f"prediction error){missed}{after}",
        {"runs": list(errors)},
    )


def predicted_speedups(res: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """The map's per-epoch speed-up of EdgeGossip, by model and testbed."""
    settings = (res.get("regime") or {}).get("settings") or {}
    by: dict[str, dict[str, float]] = {}
    for doc in settings.values():
        if (v := number(doc.get("speedup"))) is not None:
            by.setdefault(str(doc.get("model")), {})[str(doc.get("bed"))] = v
    return by


def _ratio(top: Mapping[int, float], bottom: Mapping[int, float]) -> dict[int, float]:
    """Per seed that has both, ``top`` over ``bottom``."""
    return {s: v / bottom[s] for s, v in sorted(top.items()) if bottom.get(s)}


def r_eg_6(res: Mapping[str, Any]) -> list[Claim]:
    """R-EG-6, per epoch: EdgeGossip's speed-up with the heavier model over its speed-up with
    the plan's model on edgegossip-4 (R-EG-6), and its speed-up at 6 platforms over 2, the
    fastest host 4x the slowest (R-EG-6b), each seed against itself; the map's prediction
    beside. Where the runs do not exist (``--quick``, ``--smoke``), one row says so with the
    prediction."""
    by = predicted_speedups(res)
    said = "; ".join(
        f"{m}: " + ", ".join(f"{v:.2f}x on {bed}" for bed, v in beds.items())
        for m, beds in by.items()
    )
    predicted = f" The cost model predicts per epoch {said}." if said else ""
    rows = setting_rows(res)
    six = res.get("r_eg_6") or {}
    plan = plan_model(res.get("regime") or {}) or "lenet5"
    per_epoch = "time per epoch, not to a target"
    out: list[Claim] = []
    if six.get("model"):
        heavy = str(six["model"])
        got = _ratio(
            measured_speedups(rows.get(f"{heavy}@edgegossip-4") or []),
            measured_speedups(rows.get(f"{plan}@edgegossip-4") or []),
        )
        pred_h = by.get(heavy, {}).get("edgegossip-4")
        pred_p = by.get(plan, {}).get("edgegossip-4")
        pred = pred_h / pred_p if pred_h and pred_p else None
        vals = list(got.values())
        epochs = next((r.get("epochs") for r in six.get("runs") or []), None)
        out.append(
            Claim(
                "R-EG-6",
                f"model cost on edgegossip-4: EdgeGossip's per-epoch speed-up over "
                f"epoch-synchronous GoSGD with {heavy}, over its speed-up with {plan} (same seed)",
                f"> 1: a larger speed-up for the heavier model (Fig. 6, {plan} the smallest)",
                Stat.of(vals),
                "x",
                sorted(got),
                statistics.median(vals) > 1.0 if vals else None,
                f"{per_epoch}: the paper's Fig. 6 is to a target, where {plan}'s quick rise to "
                "0.95 shrinks its speed-up; per epoch the model sees the same 4x heterogeneity "
                f"for both models and predicted {fmt(pred, '.2f')}x ({heavy} "
                f"{fmt(pred_h, '.2f')}x, {plan} {fmt(pred_p, '.2f')}x); {heavy} trained "
                f"{epochs} epochs a run",
                {"per_seed": got, "predicted": pred},
            )
        )
    scale = six.get("scale") or {}
    if scale:
        ups = {
            n: measured_speedups(rows.get(f"{plan}@{scale_bed(n)}") or [])
            for n in sorted({*map(int, scale), 4})
        }
        lo, hi = min(ups), max(ups)
        got = _ratio(ups[hi], ups[lo])
        vals = list(got.values())
        med = ", ".join(f"{n}: {statistics.median(u.values()):.2f}x" for n, u in ups.items() if u)
        said_by = ", ".join(
            f"{n}: {v:.2f}x" for n in ups if (v := by.get(plan, {}).get(scale_bed(n))) is not None
        )
        out.append(
            Claim(
                "R-EG-6b",
                f"scale: EdgeGossip's per-epoch speed-up over epoch-synchronous GoSGD at {hi} "
                f"platforms over its speed-up at {lo} ({plan}; the fastest host 4x the slowest "
                "at every count; same seed)",
                "> 1: larger deployments gain more (Fig. 6)",
                Stat.of(vals),
                "x",
                sorted(got),
                statistics.median(vals) > 1.0 if vals else None,
                f"{per_epoch}; measured by platforms (median over seeds) {med}; predicted "
                f"{said_by}: with the fastest/slowest ratio held at 4x the model's bound is 4x at "
                "every count (gossip.md 0.3), so it predicts little change with scale",
                {"per_seed": got, "by_platforms": {str(n): u for n, u in ups.items()}},
            )
        )
    if out:
        return out
    return [
        Claim(
            "R-EG-6",
            "scale and model cost: 2, 3, 4 and 6 platforms (fastest/slowest 4x), LeNet-5 and cnn2",
            "a larger speed-up for cnn2 than for LeNet-5 (Fig. 6)",
            None,
            "x",
            [],
            None,
            "not measured in this mode: the full plan runs it (cnn2 on edgegossip-4, LeNet-5 "
            "on 2, 3 and 6 platforms; time per epoch)." + predicted,
            {"predicted_speedup": by},
        )
    ]


def regime_table(res: Mapping[str, Any]) -> str:
    """The map: every setting and arm, predicted (before the runs) beside measured."""
    regime = res.get("regime") or {}
    settings = regime.get("settings") or {}
    if not settings:
        return "No prediction was made (no profile)."
    measured = setting_rows(res)
    when = (
        "before the first measured run"
        if regime.get("before_measured_runs", True)
        else "**after measured runs existed** (a resumed older reproduction)"
    )
    lines = [
        written_by(regime) + f", {when}. Models {', '.join(regime.get('models', []))}; N = "
        f"{regime.get('training_samples')} training samples. {regime.get('rule')}. Reference "
        f"device: {regime.get('reference')}. Seconds of training per epoch; speed-up: "
        "epoch-synchronous GoSGD's time per epoch over the arm's. Measured: median over seeds; "
        "'-' where the setting did not run.",
        "",
        "| setting | arm | predicted s/epoch | measured s/epoch | error | predicted speed-up "
        "| measured speed-up |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for key, doc in settings.items():
        rows = measured.get(key) or []
        arms = doc.get("arms") or {}
        base = number((arms.get(BASE) or {}).get("epoch_s"))
        for arm, a in arms.items():
            mine = [v for r in rows if r["arm"] == arm and (v := epoch_s(r))]
            ran = {r["arm"] for r in rows}
            if (rows and arm not in ran) or (not rows and arm not in UNMEASURED_ARMS):
                continue  # an arm this setting's runs did not include
            pred = number(a.get("epoch_s"))
            got = statistics.median(mine) if mine else None
            err = got / pred - 1 if got and pred else None
            ups = list(measured_speedups(rows, arm).values()) if arm != BASE else []
            lines.append(
                f"| {key} | {arm} | {fmt(pred, '.3f')} | {fmt(got, '.3f')} | "
                f"{fmt(100 * err if err is not None else None, '+.0f')}"
                f"{'%' if err is not None else ''} | "
                f"{fmt(base / pred if base and pred and arm != BASE else None, '.2f')} | "
                f"{fmt(statistics.median(ups) if ups else None, '.2f')} |"
            )
    return "\n".join(lines)
