"""The ``edgetrain`` Typer application: registers commands and runs the one error handler."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

import edgetrain
from edgetrain.cli import (
    aggregate_cmd,
    data_cmd,
    emulate_cmd,
    env_cmd,
    keys_cmd,
    launch_cmd,
    models_cmd,
    plan_cmd,
    profile_cmd,
    report_cmd,
    worker_cmd,
)
from edgetrain.errors import EdgetrainError

# Click's UsageError and ClickException, whether typer vendors click (>= 0.26) or depends on it.
UsageError: type[Exception] = typer.BadParameter.__mro__[1]
ClickException: type[Exception] = UsageError.__mro__[1]

app = typer.Typer(
    name="edgetrain",
    help=(
        "Train deep neural networks across heterogeneous edge devices.\n\n"
        "Example: edgetrain launch recipes/quickstart.toml"
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"edgetrain {edgetrain.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Train deep neural networks across heterogeneous edge devices."""


app.command("env")(env_cmd.env)
app.command("launch")(launch_cmd.launch)
app.command("worker", hidden=True)(worker_cmd.worker)
app.command("report")(report_cmd.report)
app.add_typer(profile_cmd.app, name="profile")
app.command("plan")(plan_cmd.plan)
app.command("aggregate")(aggregate_cmd.aggregate)
app.command("aggregate-eval")(aggregate_cmd.aggregate_eval)
app.add_typer(keys_cmd.app, name="keys")
app.add_typer(data_cmd.app, name="data")
app.add_typer(models_cmd.app, name="models")
app.add_typer(emulate_cmd.app, name="emulate")


def _fail(message: str, code: int) -> None:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every bad input becomes one line on stderr and exit code 2."""
    args = sys.argv[1:] if argv is None else argv
    try:
        rv = app(args=args, standalone_mode=False, prog_name="edgetrain")
    except UsageError as exc:
        ctx = getattr(exc, "ctx", None)
        cmd = ctx.command_path if ctx is not None else "edgetrain"
        _fail(f"{exc.format_message()} (see '{cmd} --help')", 2)  # type: ignore[attr-defined]
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except ClickException as exc:
        _fail(exc.format_message(), 2)  # type: ignore[attr-defined]
    except EdgetrainError as exc:
        _fail(str(exc), exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no tracebacks for users
        if os.environ.get("EDGETRAIN_DEBUG"):
            raise
        _fail(
            f"internal error: {type(exc).__name__}: {exc} "
            "(rerun with EDGETRAIN_DEBUG=1 for a traceback, and please report it)",
            1,
        )
    sys.exit(rv if isinstance(rv, int) else 0)
