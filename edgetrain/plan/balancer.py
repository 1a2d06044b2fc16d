"""EdgeGossip's gossip training balancer (Algorithm 1, with the specification's fixes). Pure.

Every platform i reports a predicted throughput p_i (samples/s) and holds |X_i| samples. A
platform whose p_i is below ``p_threshold`` (or that reported nothing: it is gone) has failed
and gets T_i = inf; the others T_i = |X_i| / p_i, the predicted time of a full local epoch.

- Fix 1 (the printed algorithm tests an undefined prefix sum inside its loop): the failed
  fraction is tested once, after the loop, over all E platforms. Above ``f_threshold`` the
  balancer halts (``on_failure = "halt"``: the run stops naming the failed platforms) or, with
  ``on_failure = "redistribute"``, spreads the failed platforms' share of the data over the
  survivors in proportion to their throughput, so they still finish together.
- Fix 2 (the paper loops over the successful platforms only): failed platforms get r = 0.

Then r_i = T_(1) / T_i with T_(1) the smallest T: every surviving platform is predicted to
finish its share r_i |X_i| in the same time T_(1), and the fastest keeps all its data. A
platform holding no data has nothing to balance (r = 1) and does not set T_(1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

OnFailure = Literal["halt", "redistribute"]
P_THRESHOLD = 0.001  # samples/s [EG §3.3]


@dataclass(frozen=True)
class Balance:
    """The balancer's decision for one epoch."""

    ratios: dict[int, float]  # r_i per platform (0 for the failed; all 0 when halted)
    times: dict[int, float]  # T_i = |X_i| / p_i (inf for the failed)
    failed: tuple[int, ...]  # platforms counted as failed, ascending
    failed_fraction: float
    halted: bool
    redistributed: bool

    @property
    def epoch_time(self) -> float:
        """T_(1): the predicted compute time of the epoch on every surviving platform, before
        any redistribution (0 when nothing survives)."""
        finite = [t for t in self.times.values() if math.isfinite(t) and t > 0]
        return min(finite) if finite else 0.0


def _usable(p: float | None, threshold: float) -> bool:
    return p is not None and math.isfinite(p) and p >= threshold


def balance(
    throughputs: Mapping[int, float | None],
    sizes: Mapping[int, int],
    p_threshold: float = P_THRESHOLD,
    f_threshold: float = 0.25,
    on_failure: OnFailure = "halt",
) -> Balance:
    """Algorithm 1 over the platforms of ``sizes`` (E = len(sizes)).

    ``throughputs[i]`` is platform i's prediction; a platform missing from it, or with None,
    NaN or a value below ``p_threshold``, has failed."""
    platforms = sorted(sizes)
    if not platforms:
        return Balance({}, {}, (), 0.0, False, False)
    failed = tuple(i for i in platforms if not _usable(throughputs.get(i), p_threshold))
    fraction = len(failed) / len(platforms)
    times: dict[int, float] = {}
    for i in platforms:
        p = throughputs.get(i)
        times[i] = math.inf if i in failed or p is None else sizes[i] / p
    survivors = [i for i in platforms if i not in failed]
    over = fraction > f_threshold
    if over and (on_failure == "halt" or not survivors):
        return Balance({i: 0.0 for i in platforms}, times, failed, fraction, True, False)
    with_data = [times[i] for i in survivors if sizes[i] > 0]
    fastest = min(with_data) if with_data else 0.0
    ratios: dict[int, float] = {}
    for i in platforms:
        if i in failed:
            ratios[i] = 0.0
        elif sizes[i] == 0 or fastest == 0.0:
            ratios[i] = 1.0
        else:
            ratios[i] = fastest / times[i]
    if over:  # redistribute: the failed platforms' data, spread by throughput
        share = sum(sizes[i] for i in failed)
        speed = {i: float(throughputs[i] or 0.0) for i in survivors if sizes[i] > 0}
        total = sum(speed.values())
        for i, p in speed.items():
            ratios[i] += share * p / total / sizes[i]
    return Balance(ratios, times, failed, fraction, False, over)


def halt_reason(
    result: Balance,
    labels: Mapping[int, str],
    p_threshold: float,
    f_threshold: float,
) -> str:
    """One line naming the failed platforms, for a run the balancer stops."""
    names = ", ".join(labels.get(i, f"worker {i}") for i in result.failed)
    total = len(result.ratios)
    return (
        f"EdgeGossip balancer: {len(result.failed)} of {total} workers failed (predicted "
        f"throughput below p_threshold {p_threshold:g} samples/s, or lost): {names}; "
        f"{result.failed_fraction:.0%} > f_threshold {f_threshold:g} "
        '(set [edgegossip] on_failure = "redistribute" to go on without them)'
    )
