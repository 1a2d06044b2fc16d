"""Performance predictor (EdgeGossip §3.3): contention U -> slowdown RG(U) >= 1, and throughput.

U is (co-running core use as a fraction of the cores, co-running network B/s, co-running disk
B/s) from :mod:`edgetrain.profile.sampler`; RG = (step time under U) / (uncontended step time
t0). The regression is scikit-learn ridge regression (alpha 0.1) on standardised features
(core, network MB/s, disk MB/s): a linear model extrapolates to contention levels outside the
training range, which tree ensembles cannot, and on the runs measured here neither a squared
core term nor a robust (Huber) loss lowered the held-out error. It extrapolates only so far:
each feature is clipped to its training range widened by half that range on either side
(``REACH``), so a level one step past the profiled ones is still predicted, while a feature
the history never saw vary (the profile's network rate is about 0, a gossip worker's own
traffic leaks megabytes a second into it) does not multiply the slowdown by 10^5, as it did on
the EdgeGossip testbed before. Predictions are clipped to RG >= 1. Training data is the
history file (JSON lines, one :class:`ContentionRecord` each; never pickled), so every run
also learns from earlier ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.errors import EdgetrainError


@dataclass(frozen=True)
class ContentionRecord:
    """One measured window: its contention vector, step times and slowdown."""

    run: str
    model: str
    batch: int
    level: float
    u: tuple[float, float, float]
    t0: float
    t: float

    @property
    def rg(self) -> float:
        return self.t / self.t0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["u"] = list(self.u)
        d["rg"] = self.rg
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ContentionRecord:
        u = [float(v) for v in d["u"]]
        if len(u) != 3 or float(d["t0"]) <= 0 or float(d["t"]) <= 0:
            raise ValueError("bad record")
        return cls(
            str(d["run"]), str(d["model"]), int(d["batch"]), float(d["level"]),
            (u[0], u[1], u[2]), float(d["t0"]), float(d["t"]),
        )  # fmt: skip


REACH = 0.5  # how far past its training range, in units of that range, a feature may go


def features(u: Sequence[float]) -> list[float]:
    core, net, disk = float(u[0]), float(u[1]), float(u[2])
    return [core, net / 1e6, disk / 1e6]


class Predictor:
    """RG(U) regression; fit it on records, then predict slowdowns, times and throughputs."""

    def __init__(self, alpha: float = 0.1) -> None:
        from sklearn.linear_model import Ridge
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        self.model = make_pipeline(StandardScaler(), Ridge(alpha=alpha))
        self.lo = self.hi = np.zeros(3)
        self.fitted = False

    def fit(self, records: Sequence[ContentionRecord]) -> Predictor:
        if len(records) < 2:
            raise EdgetrainError("the predictor needs at least 2 contention records")
        x = np.array([features(r.u) for r in records])
        y = np.array([r.rg for r in records])
        self.model.fit(x, y)
        lo, hi = x.min(axis=0), x.max(axis=0)
        self.lo, self.hi = lo - REACH * (hi - lo), hi + REACH * (hi - lo)
        self.fitted = True
        return self

    def predict_rg(self, u: Sequence[float]) -> float:
        """Predicted slowdown under ``u`` (>= 1), each feature held within the reach of the
        training range."""
        x = np.clip(np.array([features(u)]), self.lo, self.hi)
        rg = float(self.model.predict(x)[0])
        return max(rg, 1.0)

    def predict_time(self, t0: float, u: Sequence[float]) -> float:
        """t = t0 * RG(U)."""
        return t0 * self.predict_rg(u)

    def throughput(self, samples_per_s0: float, u: Sequence[float]) -> float:
        """p in samples/s under ``u``, from the uncontended throughput."""
        return samples_per_s0 / self.predict_rg(u)


def platform_throughput(times_per_sample: Iterable[float]) -> float:
    """A platform with I executors: p = sum over executors of 1 / t_i."""
    return float(sum(1.0 / t for t in times_per_sample if t > 0))


def held_out_mape(
    records: Sequence[ContentionRecord], run: str
) -> tuple[float, dict[float, float]]:
    """Mean absolute percentage error of predicted step times on each held-out level of ``run``.

    For every level of ``run``, the predictor is trained on all records except that level's
    windows of ``run`` (other runs' records stay: they are history), then predicts each held-out
    window's time t0 * RG(U). Returns the mean over windows, and the mean per level.
    """
    mine = [r for r in records if r.run == run]
    levels = sorted({r.level for r in mine})
    errors: dict[float, list[float]] = {}
    for level in levels:
        train = [r for r in records if not (r.run == run and r.level == level)]
        if len(train) < 2:
            continue
        pred = Predictor().fit(train)
        for r in mine:
            if r.level == level:
                t_hat = pred.predict_time(r.t0, r.u)
                errors.setdefault(level, []).append(abs(t_hat - r.t) / r.t)
    flat = [e for errs in errors.values() for e in errs]
    if not flat:
        raise EdgetrainError("not enough contention records for a held-out error")
    return float(np.mean(flat)), {lv: float(np.mean(e)) for lv, e in errors.items()}


def history_error(records: Sequence[ContentionRecord]) -> float | None:
    """The held-out error of a whole history: the mean over its runs of :func:`held_out_mape`
    (None where no run has a level to hold out)."""
    errors: list[float] = []
    for run in sorted({r.run for r in records}):
        try:
            errors.append(held_out_mape(records, run)[0])
        except EdgetrainError:
            continue
    return float(np.mean(errors)) if errors else None


def read_history(path: Path) -> list[ContentionRecord]:
    """Records of earlier runs; unreadable lines are skipped."""
    out: list[ContentionRecord] = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(ContentionRecord.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError, IndexError):
            continue
    return out


def append_history(path: Path, records: Iterable[ContentionRecord]) -> None:
    """Append records as JSON lines (one write, then fsync)."""
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r.to_dict()) + "\n" for r in records)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
