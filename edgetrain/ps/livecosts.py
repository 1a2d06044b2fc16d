"""Costs measured during training, as the planner wants them: per-layer compute means and a
per-direction link fit ``duration = dt + bytes / bandwidth``. Pure.

The link fit is a robust line (Theil-Sen) over the last transmissions (each with ``held_s``,
the time a server parked the request waiting for a version, taken out: that is
synchronisation, not the link). ``dt`` is the mean of the two directions' intercepts, clamped
at 0, as the paper's constant per-transmission overhead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgetrain.plan.costs import LayerCosts

SAME_SIZE = 0.05  # transmissions within 5% of each other's size count as one size


@dataclass(frozen=True)
class LinkFit:
    dt: float  # seconds per transmission
    bandwidth: float  # bytes per second
    samples: int

    def to_dict(self) -> dict[str, float]:
        return {"dt_s": self.dt, "bandwidth_Bps": self.bandwidth, "samples": self.samples}


def fit_link(samples: Sequence[tuple[int, float]], fallback_bw: float = 1e9) -> LinkFit | None:
    """``seconds = dt + bytes / bw`` over ``(bytes, seconds)``, fitted robustly; None if too few.

    Theil-Sen: the slope is the median of the slopes between every two samples of different
    sizes, the intercept the median of ``seconds - slope * bytes``. Least squares is not used:
    on an unshaped link every transmission takes about the same millisecond, and one stall of
    a large one (a scheduler hiccup, a page fault) then sets the slope, which once made a
    loopback link look like 2 kB/s and its predicted iteration 10,000 times too long. The
    median ignores up to 29% of such outliers.

    With one size only (every transmission the same length, give or take 5%: a segment's
    header grows by a byte when the iteration number does) the slope is unknown: the
    bandwidth then comes from the mean rate and dt is 0. A slope that is not positive means the
    size does not show in the time: dt is then the median time and the bandwidth
    ``fallback_bw``."""
    if len(samples) < 2:
        return None
    x = np.array([s[0] for s in samples], dtype=np.float64)
    y = np.array([s[1] for s in samples], dtype=np.float64)
    return fit_line(x, y, fallback_bw)


def fit_line(
    x: np.ndarray, y: np.ndarray, fallback_bw: float = 1e9, max_pairs: int | None = None
) -> LinkFit:
    """:func:`fit_link` over arrays of bytes ``x`` and seconds ``y`` (two samples at least;
    a negative time counts as 0). With ``max_pairs``, more samples than give that many pairs
    are compared over that many pairs drawn at random (a fixed seed: the same samples give the
    same fit), an estimate of the same median."""
    y = np.maximum(y, 0.0)
    n = len(x)
    if max_pairs is not None and n * (n - 1) // 2 > max_pairs:
        i, j = np.random.default_rng(0).integers(0, n, size=(2, max_pairs))
        i, j = i[i != j], j[i != j]
    else:
        i, j = np.triu_indices(n, k=1)
    dx = x[j] - x[i]
    # sizes that differ by a few header bytes (an iteration number one digit longer) are one
    # size: the slope between them is jitter divided by a handful of bytes
    apart = np.abs(dx) >= SAME_SIZE * np.maximum(x[i], x[j])
    if not apart.any():
        rate = float(x.mean() / y.mean()) if y.mean() > 0 else fallback_bw
        return LinkFit(0.0, rate, n)
    slope = float(np.median((y[j] - y[i])[apart] / dx[apart]))
    if slope <= 0:  # the size does not show in the time: it is all per-transmission overhead
        return LinkFit(float(np.median(y)), fallback_bw, n)
    return LinkFit(max(0.0, float(np.median(y - slope * x))), 1.0 / slope, n)


def layer_costs(
    layer_bytes: Sequence[int],
    fc: np.ndarray,
    bc: np.ndarray,
    pull: LinkFit,
    push: LinkFit,
    names: Sequence[str] = (),
) -> LayerCosts:
    """The planner's costs: ``pt = bytes / bw_pull``, ``gt = bytes / bw_push``, measured
    compute, ``dt`` the mean of both intercepts."""
    nbytes = np.asarray(layer_bytes, dtype=np.float64)
    return LayerCosts(
        pt=nbytes / pull.bandwidth,
        fc=np.asarray(fc, dtype=np.float64),
        bc=np.asarray(bc, dtype=np.float64),
        gt=nbytes / push.bandwidth,
        dt=max(0.0, (pull.dt + push.dt) / 2.0),
        names=tuple(names),
    )


def mean_rows(rows: Sequence[Sequence[float]] | Sequence[np.ndarray]) -> np.ndarray:
    """The per-layer mean over measured iterations.

    The mean, not the median: under a CPU quota (cgroup CFS, 100 ms periods) a process runs
    at full speed until its quota is spent and then stops until the period ends, so a few
    layers of each iteration carry a long stall and most carry none. A median per layer drops
    every stall and predicts an unthrottled machine; the mean spreads them over the layers in
    proportion, which is what the cost model's steady compute rate is."""
    out: np.ndarray = np.mean(np.asarray(rows, dtype=np.float64), axis=0)
    return out
