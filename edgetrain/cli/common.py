"""Shared CLI plumbing: the ``--format`` option, JSON/text output and the console."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any

import typer
from rich.console import Console

# Piped or redirected output has no terminal width; rich would then assume 80 columns and cut
# wide tables (compare, report) into unreadable stubs. Files and pipes get 160 unless COLUMNS
# says otherwise.
PIPE_WIDTH = 160


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    piped = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, width=PIPE_WIDTH if piped else None)


console = _console(stderr=False)
err_console = _console(stderr=True)


class OutputFormat(str, Enum):
    text = "text"
    json = "json"


FormatOption = Annotated[
    OutputFormat,
    typer.Option("--format", "-f", help="Output format: text (rich tables) or json."),
]
HostListOption = Annotated[
    str | None,
    typer.Option(
        "-H", "--host-list", metavar="HOST:N,...", help="ssh hosts and worker slots: a:2,b:1."
    ),
]
RemotePythonOption = Annotated[
    str | None,
    typer.Option(help="Python on the hosts of -H (default: this interpreter's path)."),
]


def error_line(problem: str, fix: str | None = None, as_json: bool = False) -> str:
    """An error as the one line a user (``error: ...``) or a script (``{"error", "fix"}``)
    reads on stderr."""
    if as_json:
        return json.dumps({"error": problem, "fix": fix}) + "\n"
    return f"error: {problem}{'; ' + fix if fix else ''}\n"


def wants_json(args: list[str]) -> bool:
    """True if the command line asks for ``--format json`` (errors then come as JSON too)."""
    for i, arg in enumerate(args):
        if arg in ("--format", "-f") and i + 1 < len(args) and args[i + 1] == "json":
            return True
        if arg in ("--format=json", "-fjson"):
            return True
    return False


def emit(data: Any, fmt: OutputFormat, render_text: Callable[[], None]) -> None:
    """Print ``data`` as JSON on stdout, or call ``render_text`` for the rich rendering."""
    if fmt == OutputFormat.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        sys.stdout.flush()
    else:
        render_text()
