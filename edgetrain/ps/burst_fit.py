"""The link fit of pipelined transmissions, read over whole bursts. Pure.

A burst is a transmission that paid its own round trip (a leader) and the ones sent behind it
while it was in flight (followers), each logged from the end of the one before it
(:mod:`.transmitter`). Per follower, that stretch is its overhead and its transfer only when
the trainer applies every answer the moment it comes. It does not on a small device: a trainer
held to part of a core by its cgroup is frozen for tens of milliseconds at a time, answers pile
up on its socket meanwhile, and the first one applied after a freeze is logged with the freeze
in its time while the rest are logged at almost nothing. A shard that is short of CPU does the
same to its acknowledgements. In the DynaComm reproduction (issue 28) half of a layer-by-layer
iteration's pushes were logged at under 0.1 ms, a 332 kB one among them, and the fit of
:func:`~edgetrain.ps.livecosts.fit_link` over single transmissions, whose median tolerates 29%
of outliers, read a 300 Mbit/s link at 84 MB/s to 94 GB/s: the planner, told pulls and pushes
cost nothing, cut anywhere.

Over a run of consecutive followers the freezes only move time from one to another: the stretch
from one follower's end to a later one's is the link's time for the transmissions between,
whatever happened inside it, ``k * dt + bytes / bandwidth`` for ``k`` transmissions. Divided by
``k``, every stretch within a burst is one sample of the per-transmission line (its mean size,
its mean time), and the robust line over those samples
(:func:`~edgetrain.ps.livecosts.fit_line`) gives ``dt`` and the bandwidth as the single
transmissions would if they were timed right. Long stretches carry the rate through the
freezes; short ones, of very different mean sizes, tell ``dt`` apart. Their number grows with
the square of a burst's length, so the robust line compares :data:`MAX_PAIRS` pairs of them
drawn at random, not every pair.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from edgetrain.ps.livecosts import LinkFit, fit_line

MAX_PAIRS = 5_000  # pairs of stretches compared at most (a 0.45-core trainer re-plans often)


def bursts(samples: Sequence[tuple[int, float, bool]]) -> list[list[tuple[int, float]]]:
    """The followers of each burst, in order: ``(bytes, seconds)`` of the transmissions after
    each leader up to the next one (followers before the first leader are left out: their
    leader fell out of the window)."""
    out: list[list[tuple[int, float]]] = []
    current: list[tuple[int, float]] | None = None
    for nbytes, seconds, lead in samples:
        if lead:
            current = []
            out.append(current)
        elif current is not None:
            current.append((int(nbytes), max(0.0, float(seconds))))
    return [b for b in out if b]


@functools.lru_cache(maxsize=256)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ``i < j`` of ``n`` points (kept: a burst's length recurs at every re-plan)."""
    i, j = np.triu_indices(n, k=1)
    i.flags.writeable = j.flags.writeable = False
    return i, j


def _stretches(runs: list[list[tuple[int, float]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bytes, seconds and transmission counts of every stretch between two follower ends (or
    the leader's end and a follower's) within one burst."""
    parts: list[np.ndarray] = []
    for run in runs:
        cum = np.zeros((len(run) + 1, 2))
        np.cumsum(np.asarray(run, dtype=np.float64), axis=0, out=cum[1:])
        i, j = _pairs(len(cum))
        parts.append(np.column_stack([cum[j] - cum[i], j - i]))
    out = np.concatenate(parts)
    return out[:, 0], out[:, 1], out[:, 2]


def fit_bursts(samples: Sequence[tuple[int, float, bool]]) -> LinkFit | None:
    """``seconds = dt + bytes / bandwidth`` of the followers in ``(bytes, seconds, lead)``,
    read over the stretches of each burst; None when no burst has a follower."""
    runs = bursts(samples)
    if not runs:
        return None
    nbytes, seconds, count = _stretches(runs)
    if len(nbytes) < 2:  # one stretch only: a single follower, its own line through the origin
        return LinkFit(0.0, float(nbytes[0] / seconds[0]) if seconds[0] > 0 else 1e9, 1)
    fit = fit_line(nbytes / count, seconds / count, max_pairs=MAX_PAIRS)
    return LinkFit(fit.dt, fit.bandwidth, sum(len(r) for r in runs))
