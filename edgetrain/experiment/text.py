"""Numbers in a report's text: a figure, a median with its range, a JSON block."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from edgetrain.experiment.claims import Row, number
from edgetrain.experiment.report import Stat


def fmt(x: Any, spec: str = ".3g") -> str:
    """A finite number in ``spec``, anything else as "-"."""
    v = number(x)
    return format(v, spec) if v is not None else "-"


def written_by(doc: Any) -> str:
    """A kept prediction's provenance: "Written <when> by commit `<sha>`" (and whether the
    tree had uncommitted changes)."""
    dirty = " with uncommitted changes" if doc.get("commit_dirty") else ""
    return f"Written {doc.get('written_at')} by commit `{doc.get('commit')}`{dirty}"


def stat(s: Stat | None, spec: str = ".3g") -> str:
    """``median [min, max]``, or "-"."""
    return f"{fmt(s.median, spec)} [{fmt(s.min, spec)}, {fmt(s.max, spec)}]" if s else "-"


def spread(values: Iterable[Any], spec: str = ".3g") -> str:
    """:func:`stat` of the finite numbers among ``values``."""
    return stat(Stat.of([number(v) for v in values]), spec)


def json_block(value: Any) -> str:
    """``value`` as indented JSON in a fenced block."""
    return "```\n" + json.dumps(value, indent=1, default=str) + "\n```"


def table(head: Sequence[str], align: str, body: Iterable[Sequence[str]]) -> str:
    """A Markdown table: the column headings, their alignment (a letter each: l, r or c) and
    the rows' cells."""
    rule = {"l": "---", "r": "---:", "c": ":---:"}
    lines = [row(head), "|" + "|".join(rule[a] for a in align) + "|"]
    return "\n".join(lines + [row(cells) for cells in body])


def row(cells: Iterable[str]) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(cells) + " |"


def arm_rows(rows: Iterable[Row], arms: Sequence[str]) -> Iterator[tuple[str, list[Row]]]:
    """Each of ``arms`` that has rows, in that order, with its rows (a table's body)."""
    rows = list(rows)
    for arm in arms:
        mine = [r for r in rows if r["arm"] == arm]
        if mine:
            yield arm, mine
