"""``edgetrain launch``: run a recipe's workers and show their progress live."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from edgetrain.cli.check_cmd import SetOption
from edgetrain.cli.common import (
    FormatOption,
    HostListOption,
    OutputFormat,
    RemotePythonOption,
    console,
    emit,
    err_console,
)


def launch(
    recipe_path: Annotated[
        Path | None, typer.Argument(metavar="RECIPE", help="Recipe TOML file.", show_default=False)
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            "--run-dir",
            metavar="RUN",
            help="Launch into this run directory (made if missing; may already hold "
            "profiles/, plans/, data/ from other commands).",
        ),
    ] = None,
    runs_root: Annotated[
        Path | None,
        typer.Option(
            "--runs-root",
            metavar="DIR",
            help="Parent of a fresh run directory (default: \\[run] runs_root, 'runs').",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Run name (default: \\[run] name).")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            metavar="RUN",
            help="Continue a stopped run from its last checkpoint (no RECIPE needed). A "
            "completed run is resumed only with --epochs.",
        ),
    ] = None,
    epochs: Annotated[
        int | None,
        typer.Option(
            "--epochs",
            metavar="N",
            help="With --resume: train the run up to N epochs in all, from its last checkpoint "
            "(N above the epochs it completed). A completed run's result is kept first in "
            "RUN/attempts/<n>/.",
            show_default=False,
        ),
    ] = None,
    hosts: Annotated[
        Path | None,
        typer.Option("--hosts", metavar="FILE", help="hosts.toml: run the workers over ssh."),
    ] = None,
    host_list: HostListOption = None,
    remote_python: RemotePythonOption = None,
    stream_logs: Annotated[
        bool | None,
        typer.Option(
            "--stream-logs/--quiet-logs",
            help="Show worker log lines, prefixed with worker and host (default: on for ssh).",
        ),
    ] = None,
    events: Annotated[
        str | None,
        typer.Option(
            "--events",
            metavar="FILE|-",
            help="Write every run event as one JSON line to FILE, or to stdout with '-' "
            "(then stdout carries only JSON lines; --format json adds the summary as the last).",
        ),
    ] = None,
    sets: SetOption = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Check everything, list every problem and print the placement; start and "
            "write nothing (as edgetrain check).",
        ),
    ] = False,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Start the coordinator and the recipe's workers, stream progress, and report.

    Writes runs/<name>-<timestamp>/ (or --run-dir RUN) with manifest.json, metrics/, logs/
    and report/, and recipe.toml: the recipe that ran (with --set, the overridden one).
    Ctrl-C (or SIGTERM) stops every worker and marks the run interrupted.

    Examples:
    edgetrain launch recipes/quickstart.toml
    edgetrain launch recipes/quickstart.toml --run-dir runs/exp1
    edgetrain launch --resume runs/quickstart-20261122-101500
    edgetrain launch --resume runs/quickstart-20261122-101500 --epochs 40
    edgetrain launch recipes/quickstart.toml --hosts hosts.toml
    edgetrain launch recipes/quickstart.toml -H jetson-a:2,jetson-b:1
    edgetrain launch recipes/quickstart.toml --events - --format json
    edgetrain launch recipes/quickstart.toml --set train.epochs=2 --set run.seed=3
    edgetrain launch recipes/quickstart.toml --dry-run
    """
    from edgetrain.cli.live import LiveProgress, summary_table
    from edgetrain.launch.api import LaunchRequest, execute, prepare
    from edgetrain.launch.events import Fanout, JsonLines

    to_stdout = events == "-"
    chatty = fmt == OutputFormat.json or to_stdout  # stdout is for data: talk on stderr
    say = err_console if chatty else console

    def sink(line: str) -> None:
        say.print(line, markup=False, highlight=False, soft_wrap=True)

    request = LaunchRequest(
        recipe_path,
        run_dir,
        runs_root,
        name,
        resume,
        hosts,
        host_list,
        remote_python,
        stream_logs,
        sink,
        epochs,
        overrides=tuple(sets or ()),
    )
    if dry_run:
        from edgetrain.cli.check_cmd import run_check

        run_check(request, fmt)
        return
    _check_events_path(events)
    setup = prepare(request)  # bad input: one line, exit 2, nothing written
    say.print(f"run directory: [bold]{setup.run_dir.path}[/]")
    if setup.inputs is not None:
        label = f"{setup.recipe.train.family}/{setup.recipe.train.technique}"
        for line in setup.inputs.lines(label):
            say.print(line, markup=False, highlight=False)
    if setup.kept is not None:
        say.print(f"kept the completed result (report/, manifest.json) in [bold]{setup.kept}[/]")
    if setup.resume is not None:
        say.print(
            f"resuming after epoch {setup.resume.epoch}, up to epoch {setup.recipe.train.epochs}"
        )
    stream = _events_stream(events)
    lines = JsonLines(stream) if stream is not None else None
    if lines is not None:
        lines.write_row({"event": "launch", "run_dir": str(setup.run_dir.path)})
    live = LiveProgress(setup.recipe, setup.roles, say) if fmt == OutputFormat.text else None
    try:
        with live if live is not None else nullcontext():
            outcome = execute(setup, Fanout([live, lines]))
    finally:
        if stream is not None and stream is not sys.stdout:
            stream.close()
    summary = outcome.summary
    if to_stdout and lines is not None and fmt == OutputFormat.json:
        lines.write_row({"event": "summary", **summary})
    elif not to_stdout:
        emit(summary, fmt, lambda: console.print(summary_table(summary)))
    else:
        err_console.print(summary_table(summary))
    say.print(f"run directory: [bold]{setup.run_dir.path}[/]  (report: {setup.run_dir.report})")
    _exit(outcome.status, outcome.error, fmt == OutputFormat.json)


def _check_events_path(events: str | None) -> None:
    """``--events FILE`` must be a file launch can append to, checked before the run
    directory is made: a directory, a missing or read-only parent is one line, nothing left."""
    from edgetrain.errors import EdgetrainError
    from edgetrain.rundir import check_writable

    if events is None or events == "-":
        return
    path = Path(events).expanduser()
    parent = path.parent
    if not parent.is_dir():
        raise EdgetrainError(f"--events: directory '{parent}' does not exist", "create it first")
    if path.is_dir():
        raise EdgetrainError(f"--events '{events}' is a directory", "name a file, or - for stdout")
    if path.is_file():
        try:  # appending nothing: the file is left as it was
            path.open("a", encoding="utf-8").close()
        except OSError as exc:
            raise EdgetrainError(
                f"--events: cannot write '{events}': {exc.strerror or exc}",
                "name a file you can write, or - for stdout",
            ) from None
    elif not path.exists():  # a pipe or a device (/dev/null) is opened as it is
        check_writable(parent, "--events", "name a file in a writable directory, or - for stdout")


def _events_stream(events: str | None) -> IO[str] | None:
    from edgetrain.errors import EdgetrainError

    if events is None:
        return None
    if events == "-":
        return sys.stdout
    try:
        return Path(events).open("a", encoding="utf-8")
    except OSError as exc:
        raise EdgetrainError(f"--events: cannot write '{events}': {exc.strerror}") from None


def _exit(status: str, error: Any, as_json: bool) -> None:
    from edgetrain.cli.common import error_line

    if status == "interrupted":
        err_console.print("interrupted: every worker was stopped; the manifest says 'interrupted'")
        raise typer.Exit(130)
    if status == "diverged":
        problem, _, fix = str(error).partition("; ")
        sys.stderr.write(error_line(problem, fix or None, as_json))
        raise typer.Exit(1)
    if status != "completed":
        sys.stderr.write(error_line(f"run failed: {error}", None, as_json))
        raise typer.Exit(1)
