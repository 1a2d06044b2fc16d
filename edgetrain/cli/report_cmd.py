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
    """Print a run's summary table and write report/summary.json, summary.md and accuracy.png.

    Example: edgetrain report runs/quickstart-20261122-101500
    """
    from edgetrain.cli.live import summary_table
    from edgetrain.report.summary import write_report
    from edgetrain.rundir import RunDir

    rd = RunDir.open(run)
    summary = write_report(rd)

    def render() -> None:
        console.print(summary_table(summary))
        console.print(
            f"wrote {rd.report / 'summary.json'}, summary.md"
            + (", accuracy.png" if summary.get("plot") else "")
        )

    emit(summary, fmt, render)
