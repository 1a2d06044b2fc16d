"""A run directory's metrics as tidy tables, what ``edgetrain export`` writes out: a row per
worker and epoch, the run's curve (a row per epoch), a row of summary figures, and the same as
scalar series (:mod:`edgetrain.report.scalars`). Pure reading: nothing in the run is written.

A resumed run's metrics files hold every attempt; its rows are kept as the summary keeps them:
an attempt resumed from epoch k replaces the epochs after k of the attempts before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgetrain.report.runs import run_status, unix_time
from edgetrain.report.scalars import (
    MODEL_EVENTS,
    Scalar,
    curve_scalars,
    epoch_of,
    epoch_scalars,
    model_scalars,
    number,
)
from edgetrain.rundir import COORDINATOR_STEM, RunDir, read_jsonl, worker_stem

ATTEMPT_OPENERS = ("registered", "resumed", "started")

# run: the run directory's name; run_id: the attempt that wrote the row; t_s: seconds from the
# attempt's start; train_s: the run's training time at the end of the epoch (evaluation
# excluded, the summary's curve; the same for every worker); epoch_s: this worker's time
# training in the epoch; loss, train_accuracy: over the epoch's training batches.
ROW_COLUMNS = (
    "epoch_s",
    "eval_s",
    "loss",
    "train_accuracy",
    "test_accuracy",
    "test_loss",
    "bytes_sent",
    "bytes_received",
)  # as the worker's epoch row has them
EPOCH_COLUMNS = (
    "run",
    "run_id",
    "family",
    "technique",
    "worker",
    "role",
    "role_index",
    "host",
    "epoch",
    "steps",
    "t_s",
    "train_s",
    *ROW_COLUMNS,
)
CURVE_COLUMNS = (
    "run",
    "epoch",
    "train_s",
    "wall_s",
    "test_accuracy",
    "loss",
    "test_loss",
    "workers",
)
SUMMARY_COLUMNS = (
    "run",
    "run_id",
    "name",
    "status",
    "family",
    "technique",
    "model",
    "dataset",
    "epochs",
    "seed",
    "workers",
    "test_accuracy",
    "test_loss",
    "averaged_test_accuracy",
    "train_s",
    "wall_s",
    "iterations",
    "bytes_sent",
    "bytes_received",
    "model_sha256",
    "model_file",
    "model_file_sha256",
    "start_time",
    "end_time",
)
# Summary figures that are numbers (MLflow logs them as metrics).
FIGURES = (
    "test_accuracy",
    "test_loss",
    "averaged_test_accuracy",
    "train_s",
    "wall_s",
    "iterations",
    "bytes_sent",
    "bytes_received",
)


def kept_epochs(
    rows: Iterable[Mapping[str, Any]], resumed: Mapping[str, int]
) -> list[tuple[str | None, Mapping[str, Any]]]:
    """A worker's ``epoch`` rows with the attempt (run id) of each, less those a later attempt
    replaced (``resumed``: attempt -> the checkpoint epoch it resumed from)."""
    kept: list[tuple[str | None, Mapping[str, Any]]] = []
    attempt: str | None = None
    for row in rows:
        opened = row.get("run_id")
        if row.get("event") in ATTEMPT_OPENERS and isinstance(opened, str) and opened != attempt:
            attempt = opened
            if attempt in resumed:
                kept = [(a, r) for a, r in kept if int(r["epoch"]) <= resumed[attempt]]
        if epoch_of(row) is not None:
            kept.append((attempt, row))
    return kept


@dataclass(frozen=True)
class RunTable:
    """One run's metrics as tables (see the module's docstring)."""

    path: Path
    manifest: dict[str, Any]
    summary: dict[str, Any]
    model: dict[str, Any] | None  # the final model's coordinator row
    epochs: list[dict[str, Any]]  # EPOCH_COLUMNS
    walls: list[float | None]  # when each of ``epochs`` was recorded, Unix seconds
    starts: dict[str, float]  # attempt run id -> its start, Unix seconds

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def run_id(self) -> str | None:
        value = self.manifest.get("run_id")
        return value if isinstance(value, str) else None

    @property
    def last_epoch(self) -> int:
        epochs = [int(p["epoch"]) for p in self.curve_rows()]
        epochs += [int(r["epoch"]) for r in self.epochs]
        return max(epochs, default=0)

    def curve_rows(self) -> list[dict[str, Any]]:
        curve = self.summary.get("curve")
        points = curve if isinstance(curve, list) else []
        return [
            {"run": self.name, **{k: p.get(k) for k in CURVE_COLUMNS[1:]}}
            for p in points
            if isinstance(p, dict) and isinstance(p.get("epoch"), int)
        ]

    def summary_row(self) -> dict[str, Any]:
        s, model = self.summary, self.model or {}
        row = {k: s.get(k) for k in SUMMARY_COLUMNS}
        row.update(
            run=self.name,
            status=run_status(self.manifest)[0],
            workers=len(self.manifest.get("workers") or []),
            test_loss=model.get("test_loss"),
            model_file=model.get("model_file"),
            model_file_sha256=model.get("model_file_sha256"),
            start_time=self.manifest.get("start_time"),
            end_time=self.manifest.get("end_time"),
        )
        return row

    def figures(self) -> dict[str, float]:
        """The summary's figures that are numbers."""
        row = self.summary_row()
        out = {}
        for key in FIGURES:
            value = number(row.get(key))
            if value is not None:
                out[key] = value
        return out

    def scalars(self) -> list[Scalar]:
        """Every series, each in step order: the workers', then the run's."""
        start = min(self.starts.values(), default=None)
        out = [
            s
            for row, wall in zip(self.epochs, self.walls, strict=True)
            for s in epoch_scalars({**row, "event": "epoch"}, wall)
        ]
        for point in self.curve_rows():
            offset = number(point.get("wall_s"))
            wall = start + offset if start is not None and offset is not None else None
            out += curve_scalars([point], wall)
        if self.model is not None:
            begun = self.starts.get(self.run_id or "", start)
            t = number(self.model.get("t"))
            wall = begun + t if begun is not None and t is not None else None
            out += model_scalars(self.model, self.last_epoch, wall)
        return out


def read_run(run_dir: RunDir) -> RunTable:
    """Read ``run_dir``'s manifest and metrics files into a :class:`RunTable`."""
    from edgetrain.report.summary import build_summary

    manifest = run_dir.read_manifest()
    summary = build_summary(run_dir)
    coordinator = read_jsonl(run_dir.metrics_file(COORDINATOR_STEM))
    resumed = {
        str(r["run_id"]): int(r["epoch"])
        for r in coordinator
        if r.get("event") == "resumed" and isinstance(r.get("epoch"), int)
    }
    starts = _starts(manifest)
    train_s = {p["epoch"]: p.get("train_s") for p in summary.get("curve") or []}
    epochs, walls = [], []
    for worker in manifest.get("workers") or []:
        rows = read_jsonl(run_dir.metrics_file(worker_stem(int(worker["id"]))))
        for attempt, row in kept_epochs(rows, resumed):
            epochs.append(_epoch_row(run_dir.path.name, summary, worker, attempt, row, train_s))
            t, begun = number(row.get("t")), starts.get(attempt or "")
            walls.append(begun + t if begun is not None and t is not None else None)
    model = next((r for r in reversed(coordinator) if r.get("event") in MODEL_EVENTS), None)
    return RunTable(run_dir.path, manifest, summary, model, epochs, walls, starts)


def _starts(manifest: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for attempt in [*(manifest.get("attempts") or []), manifest]:
        start = unix_time(attempt.get("start_time"))
        if isinstance(attempt.get("run_id"), str) and start is not None:
            out[str(attempt["run_id"])] = start
    return out


def _epoch_row(
    run: str,
    summary: Mapping[str, Any],
    worker: Mapping[str, Any],
    attempt: str | None,
    row: Mapping[str, Any],
    train_s: Mapping[Any, Any],
) -> dict[str, Any]:
    return {
        "run": run,
        "run_id": attempt,
        "family": summary.get("family"),
        "technique": summary.get("technique"),
        "worker": worker["id"],
        "role": worker.get("role"),
        "role_index": worker.get("role_index"),
        "host": worker.get("host"),
        "epoch": row["epoch"],
        "steps": row.get("steps"),
        "t_s": row.get("t"),
        "train_s": train_s.get(row["epoch"]),
        **{k: row.get(k) for k in ROW_COLUMNS},
    }
