"""Arms of a comparison: the same recipe but for the technique (or the setting a claim
varies), run at the same seeds, interleaved seed by seed (A s1, B s1, A s2, B s2, ...) so
that a drift of the machine falls on every arm alike."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Arm:
    """One side of a comparison: its run name (``OUT/runs/<name>-s<seed>``) and the recipe
    text it launches (``{seed}`` is filled per run). ``label`` names the arm in the report's
    rows when the run name carries a tag (a testbed, a pilot); by default it is the name."""

    name: str
    recipe: str
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    label: str = ""

    @property
    def arm(self) -> str:
        """The arm's name in the rows."""
        return self.label or self.name


def interleave(arms: Sequence[Arm], seeds: Sequence[int]) -> list[tuple[Arm, int]]:
    """Seed by seed, every arm in turn: A s1, B s1, A s2, B s2, ..."""
    return [(arm, seed) for seed in seeds for arm in arms]
