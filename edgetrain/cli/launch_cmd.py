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
    recipe_path: Annotated[
        Path | None, typer.Argument(metavar="[RECIPE]", help="Recipe TOML file.")
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option("--run-dir", help="Parent directory for the run (default: [run] run_dir)."),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Run name (default: [run] name).")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            metavar="RUN",
            help="Continue a stopped run from its last checkpoint (no RECIPE needed).",
        ),
    ] = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Start the coordinator and the recipe's workers, stream progress, and report.

    Writes runs/<name>-<timestamp>/ with manifest.json, metrics/, logs/ and report/.
    Ctrl-C stops every worker and marks the run interrupted.

    Examples:
    edgetrain launch recipes/quickstart.toml
    edgetrain launch --resume runs/quickstart-20261122-101500
    """
    from edgetrain.checkpoints import load_resume
    from edgetrain.cli.live import LiveProgress, summary_table
    from edgetrain.errors import EdgetrainError
    from edgetrain.launch import driver
    from edgetrain.launch.local import LocalLauncher
    from edgetrain.recipe import load_recipe
    from edgetrain.rundir import RunDir

    resume_point = None
    if resume is not None:
        if recipe_path is not None or run_dir is not None or name is not None:
            raise EdgetrainError(
                "--resume RUN takes its recipe and name from RUN; drop RECIPE, --run-dir and --name"
            )
        rd = RunDir.open(resume)
        recipe, text = load_recipe(rd.recipe)
        resume_point = load_resume(rd.path, recipe.num_workers)
        data = driver.preflight(recipe)
    else:
        if recipe_path is None:
            raise EdgetrainError("give a RECIPE to launch, or --resume RUN to continue a run")
        recipe, text = load_recipe(recipe_path)
        if name is not None:
            run_cfg = recipe.run.model_copy(update={"name": name})
            recipe = recipe.model_copy(update={"run": run_cfg})
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
        outcome = driver.run(recipe, text, rd, LocalLauncher(), data, resume=resume_point)
    else:
        with LiveProgress(recipe, console) as live:
            outcome = driver.run(
                recipe, text, rd, LocalLauncher(), data, observer=live, resume=resume_point
            )
    emit(outcome.summary, fmt, lambda: console.print(summary_table(outcome.summary)))
    say.print(f"run directory: [bold]{rd.path}[/]  (report: {rd.report})")
    if outcome.status == "interrupted":
        err_console.print("interrupted: every worker was stopped; the manifest says 'interrupted'")
        raise typer.Exit(130)
    if outcome.status != "completed":
        sys.stderr.write(f"error: run failed: {outcome.error}\n")
        raise typer.Exit(1)
