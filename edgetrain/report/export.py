"""``edgetrain export``: a run directory's metrics for the tools users already watch training
with: TensorBoard event files, an MLflow file store, or CSV.

Everything is checked before anything is written: the run directory, the output
(``RUN/export/<target>`` unless ``--out`` names one) and the optional package the target
needs. CSV and TensorBoard write a new directory (or fill an empty one) through a temporary
directory renamed at the end, so a failed export leaves nothing; MLflow adds a run to a store,
new or existing, and removes what it added when it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgetrain.errors import EdgetrainError
from edgetrain.report.extras import MLFLOW, TENSORBOARD
from edgetrain.rundir import RunDir

if TYPE_CHECKING:
    from edgetrain.report.run_table import RunTable


class Target(str, Enum):
    tensorboard = "tensorboard"
    mlflow = "mlflow"
    csv = "csv"


DEFAULT_OUT = {
    Target.tensorboard: "export/tensorboard",
    Target.mlflow: "export/mlruns",
    Target.csv: "export/csv",
}


def check_out(out: Path, target: Target) -> None:
    """Refuse an output that is a file, or a directory whose content the export would
    overwrite (for MLflow: one that is not an MLflow file store)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise EdgetrainError(f"--out '{out}' is a file", "pass a directory (made if missing)")
    if not any(out.iterdir()):
        return
    if target is Target.mlflow:
        from edgetrain.report.export_mlflow import is_store

        if is_store(out):
            return
        raise EdgetrainError(
            f"--out '{out}' is neither empty nor an MLflow file store",
            "pass a new directory, an empty one, or an mlruns directory to add the run to",
        )
    raise EdgetrainError(
        f"--out '{out}' is not empty: the export would overwrite what is there",
        "pass a new or empty directory with --out, or remove that one first",
    )


def export_run(run: Path, target: Target, out: Path | None = None) -> dict[str, Any]:
    """Export ``run`` to ``target`` under ``out``; what was written (paths, counts)."""
    from edgetrain.report.run_table import read_run

    rd = RunDir.open(run.expanduser())
    dest = out.expanduser() if out is not None else rd.path / DEFAULT_OUT[target]
    check_out(dest, target)
    if target is Target.tensorboard:
        TENSORBOARD.require("edgetrain export --to tensorboard")
    elif target is Target.mlflow:
        MLFLOW.require("edgetrain export --to mlflow")
    table = read_run(rd)
    result: dict[str, Any] = {"run": str(rd.path), "to": target.value, "out": str(dest)}
    if target is Target.mlflow:
        from edgetrain.report.export_mlflow import write_mlflow

        result.update(write_mlflow(table, dest))
        return result
    result["files"] = _into_new_dir(dest, lambda tmp: _write_files(table, target, tmp))
    if target is Target.csv:
        result["rows"] = len(table.epochs)
    else:
        result["scalars"] = len(table.scalars())
    return result


def _write_files(table: RunTable, target: Target, tmp: Path) -> list[str]:
    if target is Target.csv:
        from edgetrain.report.export_csv import write_csv

        return write_csv(table, tmp)
    from edgetrain.report.export_tensorboard import write_tensorboard

    return write_tensorboard(table, tmp)


def _into_new_dir(dest: Path, write: Callable[[Path], list[str]]) -> list[str]:
    """Call ``write(tmp)`` on a temporary directory beside ``dest``, then rename it to ``dest``
    (an empty ``dest`` is replaced); on any failure the temporary directory goes."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as exc:
        raise EdgetrainError(
            f"cannot write '{dest}': {exc.strerror or exc}", "pass a writable --out directory"
        ) from None
    try:
        files = write(tmp)
        if dest.is_dir():
            dest.rmdir()  # empty (checked before): replaced by the export
        os.rename(tmp, dest)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise EdgetrainError(
                f"cannot write '{dest}': {exc.strerror or exc}",
                "free some disk space or pass another --out",
            ) from None
        raise
    return files
