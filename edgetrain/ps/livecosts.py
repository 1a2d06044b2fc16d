"""Costs measured during training, as the planner wants them: per-layer compute medians and a
per-direction link fit ``duration = dt + bytes / bandwidth``. Pure.

The link fit is least squares over the last transmissions (each with ``held_s``, the time a
server parked the request waiting for a version, taken out: that is synchronisation, not the
link). ``dt`` is the mean of the two directions' intercepts, clamped at 0, as the paper's
constant per-transmission overhead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgetrain.plan.costs import LayerCosts


@dataclass(frozen=True)
class LinkFit:
    dt: float  # seconds per transmission
    bandwidth: float  # bytes per second
    samples: int

    def to_dict(self) -> dict[str, float]:
        return {"dt_s": self.dt, "bandwidth_Bps": self.bandwidth, "samples": self.samples}


def fit_link(samples: Sequence[tuple[int, float]], fallback_bw: float = 1e9) -> LinkFit | None:
    """Least-squares ``seconds = dt + bytes / bw`` over ``(bytes, seconds)``; None if too few.

    With one size only (every transmission the same length) the slope is unknown: the
    bandwidth then comes from the mean rate and dt is 0."""
    if len(samples) < 2:
        return None
    x = np.array([s[0] for s in samples], dtype=np.float64)
    y = np.array([max(0.0, s[1]) for s in samples], dtype=np.float64)
    if np.ptp(x) <= 0:
        rate = float(x.mean() / y.mean()) if y.mean() > 0 else fallback_bw
        return LinkFit(0.0, rate, len(samples))
    slope, intercept = np.polyfit(x, y, 1)
    if slope <= 0:  # noise swamped the size: the best we can say is the mean rate
        rate = float(x.sum() / y.sum()) if y.sum() > 0 else fallback_bw
        return LinkFit(max(0.0, float(intercept)), rate, len(samples))
    return LinkFit(max(0.0, float(intercept)), float(1.0 / slope), len(samples))


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


def median_rows(rows: Sequence[Sequence[float]] | Sequence[np.ndarray]) -> np.ndarray:
    """The per-layer median over measured iterations."""
    return np.median(np.asarray(rows, dtype=np.float64), axis=0)
