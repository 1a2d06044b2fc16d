"""``edgetrain techniques``: every family, its techniques, the roles they run, their sections."""

from __future__ import annotations

from rich import box
from rich.table import Table

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit


def techniques(fmt: FormatOption = OutputFormat.text) -> None:
    """List the technique families, their techniques, roles and recipe sections.

    A recipe picks one with \\[train] family = "..." and technique = "...".

    Examples:
    edgetrain techniques
    edgetrain techniques --format json
    """
    from edgetrain import techniques as registry

    data = registry.describe()

    def render() -> None:
        table = Table(title="technique families", box=box.SIMPLE_HEAD)
        for col in ("family", "technique", "roles", "recipe sections", "what it does"):
            table.add_column(col, overflow="fold")
        for fam in data:
            for i, tech in enumerate(fam["techniques"]):
                table.add_row(
                    fam["family"] if i == 0 else "",
                    tech["name"],
                    ", ".join(tech["roles"]),
                    ", ".join(f"\\[{s}]" for s in tech["sections"]) or "-",
                    tech["summary"],
                )
            table.add_section()
        console.print(table)
        console.print('pick one in a recipe: \\[train] family = "gossip", technique = "gosgd"')

    emit(data, fmt, render)
