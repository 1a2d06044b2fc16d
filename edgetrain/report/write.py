"""Write a run's report: ``report/summary.{json,md}``, the plots and the technique's files."""

from __future__ import annotations

from typing import Any

from edgetrain.report.plot import plot_report
from edgetrain.report.summary import (
    SUMMARY_JSON,
    SUMMARY_MD,
    build_summary,
    render_markdown,
    technique_files,
)
from edgetrain.rundir import RunDir, atomic_write_json, atomic_write_text, check_writable

__all__ = ["write_report"]


def write_report(run_dir: RunDir) -> dict[str, Any]:
    """Write ``report/summary.json``, ``summary.md`` and the plots of accuracy and loss against
    training time; return the summary (``plot``: accuracy.png, ``loss_plot``: loss.png).

    A run directory it cannot write in (read-only, another user's) is an
    :class:`~edgetrain.errors.EdgetrainError` before anything is read or written."""
    check_writable(
        run_dir.report,
        "the report directory",
        "make the run directory writable, or copy it somewhere writable and report the copy",
    )
    summary = build_summary(run_dir)
    run_dir.report.mkdir(parents=True, exist_ok=True)
    summary["plot"], summary["loss_plot"] = plot_report(summary, run_dir)
    if summary.get("technique_report"):
        summary["technique_plots"] = technique_files(summary, run_dir)
    atomic_write_json(run_dir.report / SUMMARY_JSON, summary)
    atomic_write_text(run_dir.report / SUMMARY_MD, render_markdown(summary))
    return summary
