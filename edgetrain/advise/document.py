"""``RUN/advice.json`` and the table ``edgetrain advise`` prints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from edgetrain.advise.rank import TIE

ADVICE_JSON = "advice.json"


def _seconds(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.1f} s" if s >= 10 else f"{s:.2f} s" if s >= 1 else f"{s * 1e3:.0f} ms"


def render(doc: Mapping[str, Any], console: Console) -> None:
    """The ranking as a table, each technique's reasons under it, and what was not predicted."""
    env = doc["environment"]
    hosts = env.get("hosts") or []
    console.print(
        f"[bold]{doc['model']}[/bold], batch {doc['batch_size']}, on {len(hosts)} host(s) "
        f"from {env.get('source')}"
        + (f"; what if: {', '.join(doc['what_if'])}" if doc.get("what_if") else ""),
        highlight=False,
    )
    table = Table(box=box.SIMPLE_HEAD)
    for col in ("#", "technique", "family", "per iteration", "samples/s", "epoch", "fits"):
        table.add_column(col, justify="left" if col in ("technique", "family") else "right")
    for row in doc["ranking"]:
        table.add_row(
            str(row["place"]),
            row["technique"],
            row["family"],
            f"{row['iteration_s'] * 1e3:.2f} ms",
            f"{row['samples_per_s']:,.0f}",
            _seconds(row.get("epoch_s")),
            "yes" if row["fits"] else "[red]no[/red]",
        )
    console.print(table)
    tie = doc.get("near_best") or []
    if tie:
        console.print(
            f"[yellow]near tie:[/yellow] {', '.join(tie)}, predicted within {TIE:.0%} of the "
            "fastest's time per sample (inside the cost models' error): launch each for an "
            "epoch or two and keep the faster",
            highlight=False,
            soft_wrap=True,
        )
    for row in doc["ranking"]:
        console.print(f"[bold]{row['place']}. {row['technique']}[/bold]", highlight=False)
        for reason in row["reasons"]:
            console.print(f"   {reason}", highlight=False, soft_wrap=True)
    for miss in doc.get("not_predicted") or []:
        console.print(
            f"[dim]not predicted: {miss['technique']} ({miss['why']})[/dim]",
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"[dim]{doc['caveat']}[/dim]", highlight=False, soft_wrap=True)
