"""Claims from per-seed values: the pairing of two arms seed by seed, the tests a direction
must pass at every seed, and the claim rows (median, min and max over the seeds that have a
value). Pure."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from edgetrain.experiment.report import Claim, Stat, missing_values

Row = dict[str, Any]


def number(x: Any) -> float | None:
    """``x`` as a float if it is a finite number (not a bool), else None."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


def median(xs: Iterable[Any]) -> float | None:
    """The median of the finite numbers in ``xs`` (None, NaN, infinities and bools left out)."""
    vals = [v for v in (number(x) for x in xs) if v is not None]
    return statistics.median(vals) if vals else None


def ratio(a: Any, b: Any) -> float | None:
    """``a / b`` of two finite numbers, ``b`` positive (else None)."""
    x, y = number(a), number(b)
    return x / y if x is not None and y is not None and y > 0 else None


def cut(mine: Any, base: Any) -> float | None:
    """100 (1 - mine / base): how much less ``mine`` took than ``base``, in percent."""
    r = ratio(mine, base)
    return 100.0 * (1.0 - r) if r is not None else None


def every(values: Sequence[float | None], test: Callable[[float], bool]) -> bool | None:
    """Whether every seed's value passes ``test`` (a seed without one fails it); None when no
    seed has a value (not measured)."""
    if not any(v is not None for v in values):
        return None
    return all(v is not None and test(v) for v in values)


def by_seed(rows: Iterable[Row], arm: str) -> dict[int, Row]:
    """The rows of ``arm``, by seed."""
    return {r["seed"]: r for r in rows if r["arm"] == arm}


def arm_values(rows: Iterable[Row], arm: str, key: str) -> list[Any]:
    """``key`` of every row of ``arm``, in row order."""
    return [r[key] for r in rows if r["arm"] == arm]


def seeds_of(rows: Iterable[Row]) -> list[int]:
    """The seeds the rows cover, in order."""
    return sorted({int(r["seed"]) for r in rows})


def paired(
    rows: Sequence[Row],
    a: str,
    b: str,
    key: str,
    how: Callable[[Any, Any], float | None] = ratio,
) -> list[float | None]:
    """Per seed both arms ran (in seed order): ``how(a's key, b's key)``, by default ``a``'s
    over ``b``'s."""
    x, y = by_seed(rows, a), by_seed(rows, b)
    return [how(x[s].get(key), y[s].get(key)) for s in sorted(set(x) & set(y))]


def claim(
    cid: str,
    text: str,
    paper: Any,
    values: Sequence[float | None],
    unit: str,
    seeds: list[int],
    agrees: bool | None,
    deviations: str,
    /,
    *,
    reached: bool = False,
    **details: Any,
) -> Claim:
    """A claim whose figure is the median, min and max of per-seed ``values``; keyword
    arguments are its details. ``reached``: a seed has a value only if its runs reached their
    target, and the deviations say when no seed did, or how many did not."""
    if reached and Stat.of(values) is None:
        deviations = f"not reached in any seed (within the budget); {deviations}"
    elif reached:
        deviations = missing_values(values) + deviations
    return Claim(cid, text, paper, Stat.of(values), unit, seeds, agrees, deviations, details)


def not_measured(cid: str, text: str, paper: Any, unit: str, why: str) -> Claim:
    """A claim this mode did not measure, listed with the reason (never left out)."""
    return Claim(cid, text, paper, None, unit, [], None, f"not measured: {why}")


def prediction_errors(
    settings: Mapping[str, Mapping[str, Any]],
    rows_by_setting: Mapping[str, Sequence[Row]],
    predicted: str,
    measured: Callable[[Row], float | None],
) -> list[dict[str, Any]]:
    """Every measured run of a regime map whose arm the map predicted: measured / predicted - 1
    of the figure each arm's ``predicted`` key holds (``measured`` reads it off a row). Pure."""
    out = []
    for key, rows in rows_by_setting.items():
        arms = settings[key].get("arms") or {}
        for r in rows:
            pred = number((arms.get(r["arm"]) or {}).get(predicted))
            mine = measured(r)
            if pred and mine:
                out.append(
                    {"setting": key, "arm": r["arm"], "seed": r["seed"], "run": r.get("run"),
                     "predicted_s": pred, "measured_s": mine, "error": mine / pred - 1}
                )  # fmt: skip
    return out
