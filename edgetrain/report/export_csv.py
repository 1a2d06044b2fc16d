"""``edgetrain export RUN --to csv``: the run's tables as CSV files, one row per observation.

``epochs.csv``: a row per worker and epoch (:data:`~edgetrain.report.run_table.EPOCH_COLUMNS`);
``curve.csv``: the run's accuracy against training time, a row per epoch; ``summary.csv``: one
row of the run's figures. Runs exported to CSV stack: the files of several runs concatenate
into one table (the same columns, a ``run`` column telling them apart).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from edgetrain.report.run_table import CURVE_COLUMNS, EPOCH_COLUMNS, SUMMARY_COLUMNS, RunTable


def write_table(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """``rows`` under a header of ``columns`` (a missing value: an empty cell)."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def write_csv(table: RunTable, out: Path) -> list[str]:
    """Write the three files into the directory ``out``; their names."""
    write_table(out / "epochs.csv", EPOCH_COLUMNS, table.epochs)
    write_table(out / "curve.csv", CURVE_COLUMNS, table.curve_rows())
    write_table(out / "summary.csv", SUMMARY_COLUMNS, [table.summary_row()])
    return ["epochs.csv", "curve.csv", "summary.csv"]
