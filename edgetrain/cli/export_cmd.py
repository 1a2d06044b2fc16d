"""``edgetrain export RUN --to tensorboard|mlflow|csv``: a run's metrics for other tools."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit
from edgetrain.report.export import Target  # cheap: no torch, no optional package


def export(
    run: Annotated[
        Path, typer.Argument(metavar="RUN", help="A run directory.", show_default=False)
    ],
    to: Annotated[
        Target,
        typer.Option(
            "--to",
            help="tensorboard (event files), mlflow (an MLflow file store) or csv.",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Where to write (default: RUN/export/tensorboard, RUN/export/mlruns or "
            "RUN/export/csv); new or empty, or for mlflow a store to add the run to.",
        ),
    ] = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Export a run's metrics, finished or in progress: each worker's loss and accuracy per
    epoch, the run's accuracy against training time, and the summary's figures.

    csv writes epochs.csv (a row per worker and epoch), curve.csv and summary.csv.
    tensorboard writes event files with the tags \\[report] tensorboard = true writes live
    (worker-0/loss, worker-0/test_accuracy, run/test_accuracy, ...). mlflow adds the run to an
    MLflow file store: the recipe's keys as params, the series as metrics with their steps,
    the summary's figures, the report and the final model as artifacts. tensorboard and
    mlflow need their packages: pip install tensorboard, pip install mlflow-skinny. Nothing is
    overwritten: an --out that is not empty (for mlflow: not a store, or one that already
    holds the run) is refused.

    Examples:
    edgetrain export runs/quickstart-20261122-101500 --to csv
    edgetrain export runs/quickstart-20261122-101500 --to tensorboard --out tb/quickstart
    tensorboard --logdir tb
    edgetrain export runs/quickstart-20261122-101500 --to mlflow --out mlruns
    MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri file:mlruns
    """
    from edgetrain.report.export import export_run

    result = export_run(run, to, out)
    emit(result, fmt, lambda: _render(result))


def _render(result: dict[str, Any]) -> None:
    out = result["out"]
    if result["to"] == "mlflow":
        console.print(
            f"added run {result['mlflow_run_id']} ({result['params']} params, "
            f"{result['metrics']} metric values, {len(result['artifacts'])} artifacts) to "
            f"experiment '{result['experiment']}' of the MLflow store {out}",
            markup=False,
            highlight=False,
        )
        console.print(
            "view it: MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri "
            f"{result['tracking_uri']}",
            markup=False,
            highlight=False,
        )
        return
    files = ", ".join(result["files"])
    if result["to"] == "csv":
        console.print(f"wrote {out}/: {files} ({result['rows']} worker-epoch rows)", markup=False)
        return
    console.print(
        f"wrote {result['scalars']} scalars to {out}/ ({files}); view them: "
        f"tensorboard --logdir {out}",
        markup=False,
        highlight=False,
    )
