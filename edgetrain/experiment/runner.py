"""Batches of runs: arms interleaved seed by seed on one bed, each run read into a row of the
report (the reproduction says how), every row kept in run order for the report's ``runs``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.experiment.arms import Arm, interleave
from edgetrain.experiment.beds import Bed
from edgetrain.experiment.runs import run_arm

Row = dict[str, Any]
Summary = dict[str, Any]
ReadRow = Callable[[Arm, int, Summary], Row]
Around = Callable[[Arm, int], AbstractContextManager[Any]]


@dataclass
class Runner:
    """Runs arms into ``out`` (a completed run is kept) and keeps the rows read from them."""

    out: Path
    say: Callable[[str], None]
    timeout_s: float = 3600.0
    rows: list[Row] = field(default_factory=list)

    def summary(
        self, arm: Arm, seed: int, bed: Bed | None = None, hosts: Path | None = None
    ) -> Summary:
        """One arm at one seed on ``bed``'s hosts (None or a local bed: local processes), or on
        ``hosts`` (a hosts file of its own: slots placed for this run)."""
        if hosts is None and bed is not None:
            hosts = bed.hosts
        return run_arm(self.out, arm, seed, hosts, self.timeout_s, self.say)

    def batch(
        self,
        arms: Sequence[Arm],
        seeds: Sequence[int],
        bed: Bed | None,
        row: ReadRow,
        around: Around | None = None,
    ) -> list[Row]:
        """Every arm at every seed, interleaved (A s1, B s1, A s2, ...), each run inside
        ``around(arm, seed)`` when given (a trace played, a load started); the rows, which are
        also kept."""
        got = []
        for arm, seed in interleave(arms, seeds):
            with around(arm, seed) if around is not None else nullcontext():
                summary = self.summary(arm, seed, bed)
            got.append(self.keep(row(arm, seed, summary)))
        return got

    def keep(self, row: Row) -> Row:
        """Keep ``row`` for the report's runs; return it."""
        self.rows.append(row)
        return row
