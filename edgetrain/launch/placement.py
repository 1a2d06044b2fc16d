"""Which host slot each worker runs on: roles placed by host labels, else in order. Pure.

Three passes over the workers, each in worker-id order:

1. workers whose ``[[workers]]`` group names ``labels`` take the first free slot whose host
   carries all of them (none free: an error naming the worker and the labels);
2. workers whose role prefers a label (the family's placement, e.g. parameter servers on hosts
   labelled ``ps``) take the first free slot carrying it, if there is one;
3. every other worker takes the first free slot, role-preferring workers first, so servers go
   on the first hosts when no host carries their label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edgetrain.errors import EdgetrainError


class PlacementError(EdgetrainError):
    """Workers that no host slot can take."""


@dataclass(frozen=True)
class Need:
    """What one worker asks of its slot."""

    role: str
    labels: tuple[str, ...] = ()
    prefer: str | None = None


def place(needs: Sequence[Need], slots: Sequence[Sequence[str]]) -> list[int]:
    """The slot index of each worker; ``slots[k]`` are the labels of slot k's host."""
    if len(needs) != len(slots):
        raise PlacementError(
            f"the hosts have {len(slots)} worker slots but the recipe has {len(needs)} workers",
            "make the hosts' `workers` add up to the recipe's worker count",
        )
    free = list(range(len(slots)))
    out: dict[int, int] = {}

    def take(worker: int, fits: list[int]) -> None:
        out[worker] = fits[0]
        free.remove(fits[0])

    for w, need in enumerate(needs):
        if need.labels:
            fits = [k for k in free if set(need.labels) <= set(slots[k])]
            if not fits:
                raise PlacementError(
                    f"worker {w} ({need.role}) needs a host labelled {', '.join(need.labels)} "
                    "and no free slot has those labels",
                    "add the labels to a host in the hosts file, or drop `labels` from the recipe",
                )
            take(w, fits)
    for w, need in enumerate(needs):
        if w not in out and need.prefer is not None:
            fits = [k for k in free if need.prefer in slots[k]]
            if fits:
                take(w, fits)
    order = [w for w, n in enumerate(needs) if n.prefer is not None] + [
        w for w, n in enumerate(needs) if n.prefer is None
    ]
    for w in order:
        if w not in out:
            take(w, free)
    return [out[w] for w in range(len(needs))]
