"""``edgetrain env``: print the environment report."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit
from edgetrain.envinfo import environment_report


def env(fmt: FormatOption = OutputFormat.text) -> None:
    """Print versions and hardware facts; paste this into bug reports.

    Example: edgetrain env --format json
    """
    report = environment_report()

    def render() -> None:
        table = Table(title="edgetrain environment", show_header=False)
        table.add_column("key", style="bold")
        table.add_column("value")
        for key, value in report.items():
            if key == "memory_bytes" and isinstance(value, int):
                value = f"{value / 2**30:.1f} GiB"
            if isinstance(value, list):
                value = ", ".join(value) or "-"
            if key == "torchvision" and value is None:
                value = escape("not installed (its models: pip install 'edgetrain[vision]')")
            table.add_row(key, str(value))
        console.print(table)

    emit(report, fmt, render)
