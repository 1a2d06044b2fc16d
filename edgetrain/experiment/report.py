"""The shape every reproduction writes: ``paper-vs-edgetrain.json`` and its Markdown twin.

``{"paper": "...", "claims": [{"id", "claim", "paper_value", "ours": {"median", "min",
"max"}, "unit", "seeds", "direction_agrees", "deviations"}], "runs": [...], ...}``: one claim
per result of the paper, our median with min and max over seeds, whether the direction agrees,
and what differs (scale, data, model). Extra top-level keys (the testbed verification tables,
the pilot that fixed the targets, the calibration) ride along. Pure except :func:`write`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.rundir import atomic_write_json, atomic_write_text

JSON_NAME = "paper-vs-edgetrain.json"
MD_NAME = "paper-vs-edgetrain.md"


@dataclass(frozen=True)
class Stat:
    """The median, min and max of a measure over seeds."""

    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Stat | None:
        """Over the values that exist (None: no value at all)."""
        xs = [float(v) for v in values if v is not None]
        if not xs:
            return None
        return cls(statistics.median(xs), min(xs), max(xs))


@dataclass(frozen=True)
class Claim:
    """One of the paper's results beside ours."""

    id: str
    claim: str
    paper_value: float | str | None
    ours: Stat | None
    unit: str
    seeds: list[int]
    direction_agrees: bool | None
    deviations: str
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ours"] = asdict(self.ours) if self.ours is not None else None
        return d


def above_bound(values: Sequence[float | None], bound: float, why: str) -> str:
    """A deviation note for values above a bound the specification derives ("" if none is):
    such a figure is a measuring error, never a success, and the report says so."""
    over = [v for v in values if v is not None and v > bound]
    if not over:
        return ""
    return (
        f"; **{len(over)} value(s) above the bound {bound:g} ({why}): a measuring error, "
        f"not a success** (largest {max(over):.3g})"
    )


def missing_values(values: Sequence[float | None]) -> str:
    """A deviation note for seeds without a value when others have one ("" otherwise): the
    median, min and max are over the rest, and a reader must not take them for every seed."""
    missing = sum(v is None for v in values)
    if not missing or missing == len(values):
        return ""
    return (
        f"**{missing} of {len(values)} seed(s) without a value** (a run did not reach the "
        "target within the budget): the figure is over the rest; "
    )


def _cell(x: Any, unit: str = "") -> str:
    if x is None:
        return "-"
    text = str(x)
    if isinstance(x, str):  # a paper value in words ("< 1", "almost identical") has no unit
        return text
    if isinstance(x, float):
        text = f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
    return f"{text} {unit}".strip() if unit and unit not in ("x", "%") else f"{text}{unit}"


def render_markdown(
    paper: str,
    title: str,
    claims: Sequence[Claim],
    sections: Sequence[tuple[str, str]] = (),
    preamble: str = "",
) -> str:
    """The report: the claims table first (after ``preamble``, what the reader must know before
    any number, such as a calibration), then free sections (setup, testbed, pilot)."""
    lines = [f"# {title}: paper against edgetrain", ""]
    if preamble:
        lines += [preamble.rstrip(), ""]
    lines += [
        "Our value is the median over seeds, with [min, max]. A direction that agrees means our",
        "result points the same way as the paper's (faster, smaller, more accurate), not that the",
        "magnitudes match: see the deviations.",
        "",
        "| id | claim | paper | ours (median [min, max]) | seeds | direction agrees | deviations |",
        "|---|---|---:|---:|---|:---:|---|",
    ]
    for c in claims:
        ours = (
            f"{_cell(c.ours.median, c.unit)} [{_cell(c.ours.min)}, {_cell(c.ours.max)}]"
            if c.ours is not None
            else "not measured"
        )
        agrees = {True: "yes", False: "**no**", None: "-"}[c.direction_agrees]
        seeds = ", ".join(str(s) for s in c.seeds) or "-"
        lines.append(
            f"| {c.id} | {c.claim} | {_cell(c.paper_value, c.unit)} | {ours} | {seeds} | "
            f"{agrees} | {c.deviations} |"
        )
    for heading, body in sections:
        lines += ["", f"## {heading}", "", body.rstrip()]
    return "\n".join(lines) + "\n"


def write(
    out: Path,
    paper: str,
    title: str,
    claims: Sequence[Claim],
    runs: Sequence[dict[str, Any]],
    sections: Sequence[tuple[str, str]] = (),
    extra: dict[str, Any] | None = None,
    preamble: str = "",
) -> dict[str, Any]:
    """Write ``OUT/paper-vs-edgetrain.{json,md}``; return the JSON document. Both name the
    commit of the code that made the report (``commit``; ``commit_dirty``: the working tree
    had uncommitted changes to tracked files)."""
    commit = code_commit()
    doc = {
        "paper": paper,
        "commit": commit["commit"],
        "commit_dirty": commit["dirty"],
        "claims": [c.as_dict() for c in claims],
        "runs": list(runs),
        **(extra or {}),
    }
    made_by = f"Made by commit `{commit['commit'] or 'unknown (not a git checkout)'}`" + (
        " with uncommitted changes" if commit["dirty"] else ""
    )
    preamble = f"{made_by}.\n\n{preamble}" if preamble else f"{made_by}."
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / JSON_NAME, doc)
    atomic_write_text(out / MD_NAME, render_markdown(paper, title, claims, sections, preamble))
    return doc


def code_commit() -> dict[str, Any]:
    """The commit of the code running (this package's checkout) and whether its tracked files
    differ from it: ``{"commit": sha or None, "dirty": bool or None}``."""
    import subprocess

    from edgetrain.rundir import git_revision

    root = Path(__file__).resolve().parents[2]
    sha = git_revision(root)
    if sha is None:
        return {"commit": None, "dirty": None}
    try:
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": sha, "dirty": None}
    return {"commit": sha, "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}
