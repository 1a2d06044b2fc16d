"""``edgetrain report``: summarise a run directory and write its report files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit


def report(
    run: Annotated[Path, typer.Argument(metavar="RUN", help="A run directory.")],
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Print a run's summary table and write report/summary.json, summary.md, accuracy.png and
    loss.png (accuracy and loss against training time, evaluation excluded).

    Example: edgetrain report runs/quickstart-20261122-101500
    """
    from edgetrain.cli.live import summary_table
    from edgetrain.report.write import write_report
    from edgetrain.rundir import RunDir

    rd = RunDir.open(run)
    summary = write_report(rd)

    def render() -> None:
        console.print(summary_table(summary))
        console.print(
            f"wrote {rd.report / 'summary.json'}, summary.md"
            + (", accuracy.png" if summary.get("plot") else "")
            + (", loss.png" if summary.get("loss_plot") else "")
        )

    emit(summary, fmt, render)
