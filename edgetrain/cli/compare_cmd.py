"""``edgetrain compare``: runs side by side, with the speed-up against the first."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit, err_console


def compare(
    runs: Annotated[
        list[Path],
        typer.Argument(metavar="RUN...", help="Run directories; the first is the baseline."),
    ],
    target: Annotated[
        float | None,
        typer.Option(
            "--target-accuracy",
            metavar="A",
            help="Target test accuracy (0-1): time to the first epoch at or above it.",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot", metavar="FILE", help="Write a PNG of accuracy against training time."
        ),
    ] = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Compare runs: wall and training time (evaluation excluded), time to a target accuracy,
    final accuracy, iterations, bytes per link class, and speed-up against the first run.

    Examples:
    edgetrain compare runs/gosgd-1 runs/edgegossip-1 --target-accuracy 0.95
    edgetrain compare runs/a runs/b --format json --plot compare.png
    """
    from edgetrain.errors import EdgetrainError
    from edgetrain.report.compare import compare as compare_runs
    from edgetrain.report.compare import legend_labels
    from edgetrain.report.plot import plot_curves
    from edgetrain.rundir import RunDir, check_writable

    if target is not None and not 0 < target <= 1:
        raise EdgetrainError(f"--target-accuracy {target:g} is not in (0, 1]", "e.g. 0.95")
    if plot is not None and not plot.expanduser().parent.is_dir():
        raise EdgetrainError(f"--plot: directory '{plot.parent}' does not exist", "create it first")
    if plot is not None and plot.expanduser().is_dir():
        raise EdgetrainError(f"--plot '{plot}' is a directory", "name a file, e.g. compare.png")
    if plot is not None:  # before reading the runs: nothing is computed to be thrown away
        check_writable(plot.expanduser().parent, "--plot", "name a file in a writable directory")
    dirs = [RunDir.open(r) for r in runs]
    result = compare_runs(dirs, target)
    if plot is not None:
        labels = legend_labels(result["runs"])
        curves = [(label, r["curve"]) for label, r in zip(labels, result["runs"], strict=True)]
        result["plot"] = plot_curves(curves, plot.expanduser(), target)
    emit(result, fmt, lambda: _render(result))
    if plot is not None and result.get("plot") is None:
        err_console.print("no run has an evaluated epoch: no plot written")


def _s(x: Any) -> str:
    """Seconds: one decimal from 10 s up, three significant digits below (a speed-up between
    0.47 s and 0.54 s must not print as 0.5 against 0.5)."""
    if not isinstance(x, (int, float)):
        return "-"
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}"


def _mib(n: Any) -> str:
    return f"{n / 2**20:.1f}" if isinstance(n, (int, float)) else "-"


def _render(result: dict[str, Any]) -> None:
    target = result.get("target_accuracy")
    table = Table(
        title="runs side by side" + (f", target accuracy {target:g}" if target else ""),
        caption=f"speed-up: the first run's {result['speedup_of']} over each run's; "
        "MiB sent per link class (lan/wan within/between sites, peer: no sites, control)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    techniques = {f"{r.get('family')}/{r.get('technique')}" for r in result["runs"]}
    several = len(techniques) > 1
    if not several:
        table.title = f"{table.title} ({techniques.pop()})"
    cols = ["run", *(["technique"] if several else []), "wall s", "train s"]
    if target is not None:
        cols.append("target s")
    cols += ["acc", "iters", "MiB sent", "speed-up"]
    for c in cols:
        left = c in ("run", "technique", "MiB sent")
        table.add_column(c, justify="left" if left else "right", no_wrap=True, min_width=4)
    for row in result["runs"]:
        acc = row.get("final_accuracy")
        classes = " ".join(
            f"{'ctl' if k == 'control' else k} {_mib(v)}"
            for k, v in sorted(row["bytes_by_class"].items())
        )
        status = "" if row.get("status") == "completed" else f" [red]{row.get('status')}[/]"
        cells = [
            str(Path(str(row["run"])).name) + status,
            *([f"{row.get('family')}/{row.get('technique')}"] if several else []),
            _s(row.get("wall_s")),
            _s(row.get("train_s")),
        ]
        if target is not None:
            reached = row.get("time_to_target_s")
            cells.append(
                f"{_s(reached)} (ep {row['target_epoch']})" if reached is not None else "-"
            )
        speed = row.get("speedup")
        cells += [
            f"{acc:.4f}" if isinstance(acc, (int, float)) else "-",
            str(row.get("iterations")),
            classes or "-",
            f"{speed:.2f}x" if isinstance(speed, (int, float)) else "-",
        ]
        table.add_row(*cells)
    console.print(table)
    if result.get("plot"):
        console.print(f"wrote {result['plot']}")
