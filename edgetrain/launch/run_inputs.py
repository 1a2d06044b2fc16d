"""What a launch into an existing run directory reads of what other commands left there.

``edgetrain profile``, ``plan`` and ``aggregate`` write into ``RUN/profiles/``, ``RUN/plans/``
and ``RUN/data/``; a launch into RUN reads only the files its technique names (its side's
``reads``: a ``[ps] plan``, a ``[pipeline] plan``). Launch says which it used and which it
ignored, so a plan or aggregates that the run never looks at do not pass for used. Pure but for
:func:`run_dir_files`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["ARTIFACT_DIRS", "RunInputs", "classify", "run_dir_files"]

ARTIFACT_DIRS = ("profiles", "plans", "data")  # what profile, plan and aggregate write


@dataclass(frozen=True)
class RunInputs:
    """The files other commands left in RUN: those the run reads (with the recipe key that
    names each) and those it ignores."""

    used: dict[str, str]
    ignored: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "used": [{"path": p, "key": k} for p, k in self.used.items()],
            "ignored": list(self.ignored),
        }

    def lines(self, technique: str, shown: int = 4) -> list[str]:
        """What launch prints: nothing when RUN held nothing from other commands."""
        out = [f"uses from the run directory: {p} ({k})" for p, k in self.used.items()]
        if self.ignored:
            names = ", ".join(self.ignored[:shown])
            more = len(self.ignored) - shown
            if more > 0:
                names += f" and {more} more"
            reads = (
                "reads only " + ", ".join(sorted(set(self.used.values())))
                if self.used
                else "reads none of them"
            )
            out.append(f"ignores from the run directory: {names} ({technique} {reads})")
        return out


def _norm(path: str) -> str:
    return PurePosixPath(path.replace("\\", "/")).as_posix().removeprefix("./")


def classify(files: Sequence[str], reads: Mapping[str, str]) -> RunInputs:
    """Split ``files`` (relative to RUN) into those ``reads`` names and the rest.

    A file the run reads is listed as used whether or not another command wrote it (it was
    checked to exist before the launch)."""
    wanted = {_norm(p): key for p, key in reads.items()}
    present = [_norm(f) for f in files]
    used = dict(sorted(wanted.items()))
    ignored = sorted(f for f in present if f not in wanted)
    return RunInputs(used, ignored)


def run_dir_files(run_dir: Path) -> list[str]:
    """The files under ``RUN/{profiles,plans,data}`` (relative, POSIX), hidden ones (an atomic
    write's temporary file) left out."""
    out: list[str] = []
    for name in ARTIFACT_DIRS:
        folder = run_dir / name
        if not folder.is_dir():
            continue
        for f in folder.rglob("*"):
            rel = f.relative_to(run_dir)
            if f.is_file() and not any(part.startswith(".") for part in rel.parts):
                out.append(rel.as_posix())
    return sorted(out)
