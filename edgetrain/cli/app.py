"""The ``edgetrain`` Typer application: registers commands and runs the one error handler."""

from __future__ import annotations

import os
import sys
import warnings
from typing import Annotated, NoReturn

import typer

import edgetrain
from edgetrain.cli import (
    advise_cmd,
    aggregate_cmd,
    check_cmd,
    compare_cmd,
    data_cmd,
    emulate_cmd,
    env_cmd,
    export_cmd,
    hosts_cmd,
    join_cmd,
    keys_cmd,
    launch_cmd,
    models_cmd,
    plan_cmd,
    profile_cmd,
    report_cmd,
    runs_cmd,
    techniques_cmd,
    worker_cmd,
)
from edgetrain.cli.common import error_line, wants_json
from edgetrain.cli.exit_now import exit_now, watched
from edgetrain.errors import DeprecatedSpelling, EdgetrainError


def _flag_type_hidden() -> None:
    """Help shows no type for on/off flags (typer 0.29 prints ``<bool>`` beside every flag,
    ``--help`` included): a flag takes no value, so there is nothing to type."""
    import typer.core

    original = getattr(typer.core.TyperOption, "display_type_rich", None)
    if original is None:  # typer before 0.29 prints no type beside flags: nothing to hide
        return

    def display_type_rich(self: typer.core.TyperOption, ctx: object) -> str | None:
        if getattr(self, "is_flag", False):
            return None
        shown: str | None = original(self, ctx)
        return shown

    typer.core.TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flag_type_hidden()

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
app.command("check")(check_cmd.check)
app.command("worker", hidden=True)(worker_cmd.worker)
app.command("report")(report_cmd.report)
app.command("compare")(compare_cmd.compare)
app.command("export")(export_cmd.export)
app.command("runs")(runs_cmd.runs)
app.command("status")(runs_cmd.status)
app.command("logs")(runs_cmd.logs)
app.command("join")(join_cmd.join)
app.command("techniques")(techniques_cmd.techniques)
app.add_typer(profile_cmd.app, name="profile")
app.command("plan")(plan_cmd.plan)
app.command("advise")(advise_cmd.advise)
app.command("aggregate")(aggregate_cmd.aggregate)
app.command("aggregate-eval")(aggregate_cmd.aggregate_eval)
app.add_typer(keys_cmd.app, name="keys")
app.add_typer(hosts_cmd.app, name="hosts")
app.add_typer(data_cmd.app, name="data")
app.add_typer(models_cmd.app, name="models")
app.add_typer(emulate_cmd.app, name="emulate")


_JSON_ERRORS = False


def _fail(message: str, code: int, fix: str | None = None) -> None:
    sys.stderr.write(error_line(message, fix, _JSON_ERRORS))
    sys.stderr.flush()
    sys.exit(code)


def _note(message: object, category: type[Warning], *rest: object, **kw: object) -> None:
    """Deprecation notices from the library as one line each; other warnings as Python's."""
    if issubclass(category, DeprecatedSpelling):
        sys.stderr.write(f"note: {message}\n")
        sys.stderr.flush()
    else:
        _show_warning(message, category, *rest, **kw)  # type: ignore[arg-type]


_show_warning = warnings.showwarning


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every bad input becomes one line on stderr and exit code 2."""
    global _JSON_ERRORS
    args = sys.argv[1:] if argv is None else argv
    _JSON_ERRORS = wants_json(args)
    warnings.showwarning = _note
    warnings.simplefilter("always", DeprecatedSpelling)
    try:
        rv = app(args=args, standalone_mode=False, prog_name="edgetrain")
    except UsageError as exc:
        ctx = getattr(exc, "ctx", None)
        cmd = ctx.command_path if ctx is not None else "edgetrain"
        _fail(exc.format_message(), 2, f"see '{cmd} --help'")  # type: ignore[attr-defined]
    except typer.Exit as exc:
        _leave(exc.exit_code, argv)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except ClickException as exc:
        _fail(exc.format_message(), 2)  # type: ignore[attr-defined]
    except EdgetrainError as exc:
        _fail(exc.problem, exc.exit_code, exc.fix)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no tracebacks for users
        if os.environ.get("EDGETRAIN_DEBUG"):
            raise
        _fail(
            f"internal error: {type(exc).__name__}: {exc}",
            1,
            "rerun with EDGETRAIN_DEBUG=1 for a traceback, and please report it",
        )
    _leave(rv if isinstance(rv, int) else 0, argv)


def _leave(code: int, argv: list[str] | None) -> NoReturn:
    """Exit with ``code``: at once (:func:`exit_now`) where this process is the command's own
    (``argv`` None) and torch was imported, whose teardown alone takes about a second; a caller
    of :func:`main` in its own process gets SystemExit as before."""
    if argv is None and "torch" in sys.modules and not watched():
        exit_now(code)
    sys.exit(code)
