"""EdgeGossip's performance predictor on a worker: the throughput p it expects next epoch.

The paper's predictor is p = 1 / (t0 RG(U)): t0 the uncontended time per sample, RG(U) >= 1
the slowdown a regression predicts from the co-running contention U (fitted from
``edgetrain profile --contention`` history, :mod:`edgetrain.profile.predictor`). What the
balancer is told depends on ``[edgegossip] balance``:

- ``predictive``: U is the mean contention of the epoch just ended (a persistence forecast),
  and t0 adapts after every epoch to what was observed, ``t0 <- (1 - lam) t0 + lam t_obs /
  RG(U_obs)`` (lam = 0.5), which follows a slowdown /proc cannot see (a quota cut, a throttled
  CPU, an emulated ``slowdown``); without a history RG = 1 and only t0 adapts;
- ``reactive``: the throughput measured in the epoch just ended (DBS's rule);
- ``static``: 1 / t0 from before training, never changed;
- ``off``: the balancer is off (r = 1); the measured throughput is still reported.

RG(U) is used only where it predicts: the history's held-out error (each profiled level left
out in turn, the figure ``edgetrain profile --contention`` prints) must be at most
``[edgegossip] rg_max_error`` (default 15%). A regression that misses its own held-out levels
by more than that adds its error to every prediction (an epoch's U moves RG, and t0 with it),
so above it RG = 1 and t0 adapts alone, as without a history.

Before the first epoch t0 is the profile's (its uncontended step time over its batch) when the
history has the run's model, else the calibration's per-sample time over RG(U) at the time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Mode = Literal["predictive", "reactive", "static", "off"]
U = tuple[float, float, float]
LAMBDA = 0.5
RG_MAX_ERROR = 0.15  # the held-out error above which a history's RG(U) is not used
NO_LOAD: U = (0.0, 0.0, 0.0)


def adapt_t0(t0: float, t_obs: float, rg: float, lam: float = LAMBDA) -> float:
    """One EWMA step of the uncontended time per sample towards ``t_obs / rg``."""
    return (1.0 - lam) * t0 + lam * t_obs / max(rg, 1.0)


def throughput(t0: float, rg: float) -> float:
    """Samples per second at ``t0`` seconds per sample slowed down ``rg`` times."""
    return 1.0 / (t0 * max(rg, 1.0)) if t0 > 0 else 0.0


@dataclass(frozen=True)
class History:
    """What a host's contention history gives the predictor: RG(U), and the profile's t0."""

    rg: Callable[[Sequence[float]], float]
    records: int
    t0: float | None  # seconds per sample uncontended (None: the history lacks the model)
    held_out: float | None = None  # the history's held-out error (None: none measured)

    @classmethod
    def none(cls) -> History:
        return cls(_no_slowdown, 0, None)

    @property
    def rg_used(self) -> bool:
        """Whether RG(U) is a regression (else RG = 1)."""
        return self.rg is not _no_slowdown


def _no_slowdown(_u: Sequence[float]) -> float:
    return 1.0


def load_history(path: Path, model: str, max_error: float = RG_MAX_ERROR) -> History:
    """RG(U) fitted on the history at ``path``, and the newest per-sample t0 the history
    measured for ``model``. RG = 1 where there is no history there, fewer than 2 records, or a
    held-out error above ``max_error`` (or none measurable)."""
    from edgetrain.profile.predictor import Predictor, history_error, read_history

    records = read_history(path)
    if len(records) < 2:
        return History.none()
    mine = [r for r in records if r.model == model and r.batch > 0]
    t0 = mine[-1].t0 / mine[-1].batch if mine else None
    held_out = history_error(records)
    if held_out is None or held_out > max_error:
        return History(_no_slowdown, len(records), t0, held_out)
    predictor = Predictor().fit(records)
    return History(predictor.predict_rg, len(records), t0, held_out)


class LivePredictor:
    """One worker's predictions, epoch after epoch (see the module's docstring)."""

    def __init__(self, mode: Mode, history: History, lam: float = LAMBDA) -> None:
        self.mode = mode
        self.history = history
        self.lam = lam
        self.t0 = 0.0
        self.initial_t0 = 0.0
        self.rg = 1.0
        self.predicted = 0.0  # what was predicted for the epoch now running

    def rg_of(self, u: Sequence[float] | None) -> float:
        return max(1.0, float(self.history.rg(u))) if u is not None else 1.0

    def first(self, t_cal: float, u_cal: Sequence[float] | None) -> float:
        """The prediction for the first epoch, from a calibration before training: ``t_cal``
        seconds per sample measured under contention ``u_cal``."""
        self.rg = self.rg_of(u_cal)
        self.t0 = self.history.t0 if self.history.t0 else t_cal / self.rg
        self.initial_t0 = self.t0
        if self.mode in ("reactive", "off"):
            self.predicted = 1.0 / t_cal if t_cal > 0 else 0.0
        elif self.mode == "static":
            self.predicted = 1.0 / self.t0 if self.t0 > 0 else 0.0
        else:
            self.predicted = throughput(self.t0, self.rg)
        return self.predicted

    def after_epoch(self, t_obs: float, u_obs: Sequence[float] | None) -> float:
        """The prediction for the next epoch, once an epoch took ``t_obs`` seconds per sample
        under mean contention ``u_obs``."""
        if not (t_obs > 0 and math.isfinite(t_obs)):
            return self.predicted
        rg = self.rg_of(u_obs)
        if self.mode == "predictive":
            self.t0 = adapt_t0(self.t0, t_obs, rg, self.lam)
            self.rg = rg
            self.predicted = throughput(self.t0, rg)
        elif self.mode == "static":
            self.predicted = 1.0 / self.initial_t0 if self.initial_t0 > 0 else 0.0
        else:
            self.rg = rg
            self.predicted = 1.0 / t_obs
        return self.predicted


def prediction_error(predicted: float | None, observed: float | None) -> float | None:
    """|predicted - observed| / observed (None when either is missing or observed is 0)."""
    if predicted is None or observed is None or not observed > 0:
        return None
    return abs(predicted - observed) / observed
