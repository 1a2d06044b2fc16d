"""``edgetrain export RUN --to tensorboard``: the run's series as TensorBoard event files, the
tags ``[report] tensorboard = true`` writes while a run goes (:mod:`edgetrain.report.scalars`)
and ``run/train_s``, which needs the whole run."""

from __future__ import annotations

from pathlib import Path

from edgetrain.report.run_table import RunTable
from edgetrain.report.tb_events import EventWriter


def write_tensorboard(table: RunTable, out: Path) -> list[str]:
    """Write one event file into the directory ``out``; its name."""
    writer = EventWriter(out)
    try:
        writer.write(table.scalars())
    finally:
        writer.close()
    return sorted(p.name for p in out.iterdir())
