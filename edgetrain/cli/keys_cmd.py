"""``edgetrain keys``: generate the CURVE key pairs of a run (for ``security = "curve"``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit

app = typer.Typer(
    help="Generate CURVE keys for encrypted, authenticated runs.", no_args_is_help=True
)


@app.callback()
def _keys() -> None:
    """Generate CURVE keys for encrypted, authenticated runs."""


@app.command("generate")
def generate(
    directory: Annotated[
        Path, typer.Argument(metavar="DIRECTORY", help="Keys directory to create (e.g. keys).")
    ],
    force: Annotated[bool, typer.Option(help="Replace keys already in DIRECTORY.")] = False,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Write a server and a client CURVE key pair into DIRECTORY (mode 0700, files 0600).

    Set \\[run] security = "curve" and keys = "DIRECTORY" in the recipe, and copy the directory
    to every host of the run; whoever holds it can join the run.

    Example: edgetrain keys generate keys
    """
    from edgetrain.comm.security import generate_keys

    written = generate_keys(directory, force=force)
    data = {"directory": str(directory), "files": [str(p) for p in written]}

    def render() -> None:
        console.print(f"wrote {len(written)} key files to {escape(str(directory))} (0700/0600)")
        for path in written:
            console.print(f"  {escape(str(path))}")
        hint = f'set [run] security = "curve" and keys = "{directory}" in the recipe'
        console.print(escape(f"{hint}; copy the directory to every host"))

    emit(data, fmt, render)
