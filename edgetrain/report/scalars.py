"""A run's metrics as scalar series, the one naming TensorBoard and MLflow both use. Pure.

Per worker, from its ``epoch`` rows, at step = the epoch: ``worker-<id>/loss`` (training
loss), ``train_accuracy``, ``test_accuracy``, ``test_loss``, ``steps`` (optimizer steps so
far), ``epoch_s`` (the epoch's training seconds) and ``bytes_sent``; a value a worker does not
report (a pipeline stage's loss) is left out; with ``[train] eval_deferred`` the last epoch's
row also gives the earlier epochs' ``test_accuracy`` and ``test_loss``, at their epochs. For
the run, at step = the epoch: ``run/test_accuracy``, ``run/loss`` and ``run/test_loss``, the
means over the workers that reported one (the summary's curve), and ``run/train_s``, the
training time at the end of the epoch with evaluation excluded (export only: it needs the whole
run); at the last epoch, ``run/final_test_accuracy`` and ``run/final_test_loss``, the final
model's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from edgetrain.report.clock import DEFERRED

WORKER_KEYS = (
    "loss",
    "train_accuracy",
    "test_accuracy",
    "test_loss",
    "steps",
    "epoch_s",
    "bytes_sent",
)
RUN_KEYS = ("test_accuracy", "loss", "test_loss")  # the run's means per epoch
MODEL_EVENTS = ("averaged", "final_model")


@dataclass(frozen=True)
class Scalar:
    """One point of a series: ``tag`` at ``step``, written at ``wall`` (Unix seconds; None:
    now)."""

    tag: str
    value: float
    step: int
    wall: float | None = None


def number(value: Any) -> float | None:
    """A finite number as float, else None (booleans, strings, None, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def worker_tag(worker: int, key: str) -> str:
    return f"worker-{worker}/{key}"


def epoch_of(row: Mapping[str, Any]) -> int | None:
    """The epoch of a worker's ``epoch`` row (None: another row, or one without an epoch)."""
    epoch, worker = row.get("epoch"), row.get("worker")
    if row.get("event") != "epoch" or not isinstance(worker, int) or isinstance(epoch, bool):
        return None
    return epoch if isinstance(epoch, int) else None


def epoch_scalars(row: Mapping[str, Any], wall: float | None = None) -> list[Scalar]:
    """A worker's ``epoch`` metrics row as scalars (none for any other row)."""
    epoch = epoch_of(row)
    if epoch is None:
        return []
    worker = int(row["worker"])
    out = []
    for key in WORKER_KEYS:
        value = number(row.get(key))
        if value is not None:
            out.append(Scalar(worker_tag(worker, key), value, epoch, wall))
    scored = row.get(DEFERRED)  # earlier epochs' snapshots, scored after training
    for entry in scored if isinstance(scored, list) else []:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], int)):
            continue
        for key, value in (("test_accuracy", entry[1]), ("test_loss", entry[2])):
            if (v := number(value)) is not None:
                out.append(Scalar(worker_tag(worker, key), v, entry[0], wall))
    return out


def model_scalars(row: Mapping[str, Any], step: int, wall: float | None = None) -> list[Scalar]:
    """The final model's test accuracy and loss from its coordinator row (``averaged`` or
    ``final_model``), at ``step``."""
    if row.get("event") not in MODEL_EVENTS:
        return []
    out = []
    for key in ("test_accuracy", "test_loss"):
        value = number(row.get(key))
        if value is not None:
            out.append(Scalar(f"run/final_{key}", value, step, wall))
    return out


def curve_scalars(curve: list[Mapping[str, Any]], wall: float | None = None) -> list[Scalar]:
    """``run/<key>`` for each of :data:`RUN_KEYS` and ``run/train_s`` from the summary's
    curve."""
    out = []
    for point in curve:
        epoch = point.get("epoch")
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            continue
        for key in (*RUN_KEYS, "train_s"):
            value = number(point.get(key))
            if value is not None:
                out.append(Scalar(f"run/{key}", value, epoch, wall))
    return out


class RunMeans:
    """``run/test_accuracy``, ``run/loss`` and ``run/test_loss`` while the run goes: epoch E's
    means of the workers' values, written once each of ``workers`` (those whose role trains in
    epochs) has reported E, handed in its final state or failed; steps in order, each once.
    :meth:`flush` writes what is left when the run ends."""

    def __init__(self, workers: Iterable[int]) -> None:
        self._waiting = {w: 0 for w in workers}  # worker -> the last epoch it reported
        self._values: dict[int, dict[str, list[float]]] = {}  # epoch -> key -> the values
        self._written = 0  # the epochs up to this one are written
        self.last_epoch = 0  # the highest epoch any worker reported

    def add(self, row: Mapping[str, Any], wall: float | None = None) -> list[Scalar]:
        """Take a metrics row; the points it completes."""
        worker = row.get("worker")
        if row.get("event") in ("final", "failed") and isinstance(worker, int):
            self._waiting.pop(worker, None)  # it reports no more epochs
        epoch = epoch_of(row)
        if epoch is not None and isinstance(worker, int):
            if worker in self._waiting:
                self._waiting[worker] = max(epoch, self._waiting[worker])
            self.last_epoch = max(self.last_epoch, epoch)
            for key in RUN_KEYS:
                value = number(row.get(key))
                if value is not None and epoch > self._written:
                    self._values.setdefault(epoch, {}).setdefault(key, []).append(value)
        done = min(self._waiting.values()) if self._waiting else self.last_epoch
        return self._through(done, wall)

    def flush(self, wall: float | None = None) -> list[Scalar]:
        return self._through(self.last_epoch, wall)

    def _through(self, epoch: int, wall: float | None) -> list[Scalar]:
        out = []
        for e in sorted(k for k in self._values if self._written < k <= epoch):
            for key, values in self._values.pop(e).items():
                out.append(Scalar(f"run/{key}", sum(values) / len(values), e, wall))
        self._written = max(self._written, epoch)
        return out
