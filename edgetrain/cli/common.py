"""Shared CLI plumbing: the ``--format`` option, JSON/text output and the console."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)


class OutputFormat(str, Enum):
    text = "text"
    json = "json"


FormatOption = Annotated[
    OutputFormat,
    typer.Option("--format", "-f", help="Output format: text (rich tables) or json."),
]


def emit(data: Any, fmt: OutputFormat, render_text: Callable[[], None]) -> None:
    """Print ``data`` as JSON on stdout, or call ``render_text`` for the rich rendering."""
    if fmt == OutputFormat.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        sys.stdout.flush()
    else:
        render_text()
