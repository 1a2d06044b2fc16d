"""Which entry of an `edgetrain plan` file a parameter-server run uses. Pure.

A plan file holds one plan, or one per bandwidth (``--bandwidth 10mbit,100mbit,1gbit``:
``{"bandwidths": [...]}``). A run uses the entry made for the bandwidth nearest (in ratio)
the one ``[ps] plan_bandwidth`` declares, else nearest the one each trainer measures with a
short probe at start; never silently the first. Each entry carries the link it was made
with (``bandwidth_Bps``, ``dt_s``), which a trainer keeps until its live link fit is
identifiable (:mod:`edgetrain.ps.link_trust`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from edgetrain.plan.units import describe_bandwidth


@dataclass(frozen=True)
class PlanEntry:
    """One bandwidth's cuts of one technique, and the link they were planned for."""

    forward_cuts: list[int]
    backward_cuts: list[int]
    bandwidth_Bps: float | None  # None: a plan made from a cost file (no bandwidth)
    dt_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PlanEntry:
        bw, dt = d.get("bandwidth_Bps"), d.get("dt_s")
        return cls(
            [int(c) for c in d.get("forward_cuts", [])],
            [int(c) for c in d.get("backward_cuts", [])],
            float(bw) if isinstance(bw, (int, float)) and bw > 0 else None,
            float(dt) if isinstance(dt, (int, float)) and dt >= 0 else None,
        )

    @property
    def rate(self) -> str:
        return describe_bandwidth(self.bandwidth_Bps) if self.bandwidth_Bps else "no bandwidth"


def plan_entries(doc: Mapping[str, Any], technique: str) -> list[PlanEntry] | None:
    """Every entry's cuts for ``technique`` (None: an entry has no such strategy)."""
    many = doc.get("bandwidths")
    docs = many if isinstance(many, list) and many else [doc]
    out: list[PlanEntry] = []
    for d in docs:
        entry = d.get("strategies", {}).get(technique) if isinstance(d, Mapping) else None
        if not isinstance(entry, Mapping):
            return None
        out.append(
            PlanEntry.from_dict(
                {**entry, "bandwidth_Bps": d.get("bandwidth_Bps"), "dt_s": d.get("dt_s")}
            )
        )
    return out


def nearest(entries: Sequence[PlanEntry], bandwidth_Bps: float) -> int:
    """The index of the entry whose bandwidth is nearest ``bandwidth_Bps`` in ratio (the
    earlier one on a tie); an entry without a bandwidth only when no entry has one."""

    def distance(i: int) -> float:
        bw = entries[i].bandwidth_Bps
        return abs(math.log(bw / bandwidth_Bps)) if bw and bandwidth_Bps > 0 else math.inf

    return min(range(len(entries)), key=distance) if entries else 0


def choice_line(
    path: str, entries: Sequence[PlanEntry], index: int, against: float | None, how: str
) -> str:
    """One line saying which entry a run uses and why (``how``: "measured", or the recipe
    key that declared ``against``)."""
    used = entries[index]
    if len(entries) == 1:
        line = f"plan file {path}: made at {used.rate}"
        if (
            against is not None
            and used.bandwidth_Bps
            and not math.isclose(against, used.bandwidth_Bps, rel_tol=0.01)
        ):
            line += f" (the only entry; {how} {describe_bandwidth(against)})"
        return line
    rates = ", ".join(e.rate.split(" (")[0] for e in entries)
    line = f"plan file {path}: using its {used.rate} entry of {len(entries)} ({rates})"
    if against is None:
        return line + f", the first: {how} gave no bandwidth"
    return line + f", the nearest to the {describe_bandwidth(against)} {how}"
