"""``edgetrain launch``: run a recipe's workers and show their progress live."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit, err_console


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def launch(
    recipe_path: Annotated[Path, typer.Argument(metavar="RECIPE", help="Recipe TOML file.")],
    run_dir: Annotated[
        Path | None,
        typer.Option("--run-dir", help="Parent directory for the run (default: [run] run_dir)."),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Run name (default: [run] name).")] = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Start the coordinator and the recipe's workers, stream progress, and report.

    Writes runs/<name>-<timestamp>/ with manifest.json, metrics/, logs/ and report/.
    Ctrl-C stops every worker and marks the run interrupted.

    Example: edgetrain launch recipes/quickstart.toml
    """
    from edgetrain.cli.live import LiveProgress, summary_table
    from edgetrain.launch import driver
    from edgetrain.launch.local import LocalLauncher
    from edgetrain.recipe import load_recipe
    from edgetrain.rundir import RunDir

    recipe, text = load_recipe(recipe_path)
    if name is not None:
        recipe = recipe.model_copy(update={"run": recipe.run.model_copy(update={"name": name})})
    data = driver.preflight(recipe)  # bad data or model: exit 2, nothing started or written
    rd = RunDir.create(run_dir if run_dir is not None else recipe.run.run_dir, recipe.run.name)
    logging.basicConfig(
        filename=rd.logs / "launcher.log",
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    say = err_console if fmt == OutputFormat.json else console
    say.print(f"run directory: [bold]{rd.path}[/]")
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    if fmt == OutputFormat.json:
        outcome = driver.run(recipe, text, rd, LocalLauncher(), data)
    else:
        with LiveProgress(recipe, console) as live:
            outcome = driver.run(recipe, text, rd, LocalLauncher(), data, observer=live)
    emit(outcome.summary, fmt, lambda: console.print(summary_table(outcome.summary)))
    say.print(f"run directory: [bold]{rd.path}[/]  (report: {rd.report})")
    if outcome.status == "interrupted":
        err_console.print("interrupted: every worker was stopped; the manifest says 'interrupted'")
        raise typer.Exit(130)
    if outcome.status != "completed":
        sys.stderr.write(f"error: run failed: {outcome.error}\n")
        raise typer.Exit(1)
