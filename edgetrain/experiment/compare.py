"""``edgetrain compare`` of each seed's runs of a batch: the same comparison a user makes of
two run directories, kept in the report beside the claims."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from edgetrain.experiment.claims import Row


def seed_by_seed(
    rows: Iterable[Row], target: float | None, arms: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Per seed (as a string), ``edgetrain compare`` of its runs: every arm's in row order (the
    first is the baseline), or ``arms``' in that order where the seed ran all of them."""
    from edgetrain.report.compare import compare
    from edgetrain.rundir import RunDir

    runs: dict[int, dict[str, str]] = {}
    for r in rows:
        runs.setdefault(r["seed"], {})[r["arm"]] = r["run"]
    out = {}
    for seed, got in sorted(runs.items()):
        if arms is not None and not set(arms) <= set(got):
            continue
        paths = [got[a] for a in arms] if arms is not None else list(got.values())
        out[str(seed)] = compare([RunDir.open(p) for p in paths], target)
    return out
