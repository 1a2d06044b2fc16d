"""A worker's capacity curve C(m), samples/s at batch size m, for DLion's batch planner and
Ako's partition count: a pilot of timed gradient steps before training, or the ``throughput``
of ``edgetrain profile`` run on the worker's host (gossip.md B.3: pre-profiling)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from edgetrain.profile.schema import ProfileError, read_profile

log = logging.getLogger(__name__)

Curve = list[tuple[int, float]]


def pilot_sizes(b0: int) -> list[int]:
    """The batch sizes a pilot times, b0 / 8 to 4 b0: the planner's range, where a slow
    worker's batch shrinks and a fast one's grows (extrapolating a step's fixed cost misleads)."""
    return sorted({max(1, b0 // 8), max(1, b0 // 4), max(1, b0 // 2), b0, 2 * b0, 4 * b0})


def pilot(step: Callable[[int], float], sizes: list[int], seconds: float, rounds: int = 2) -> Curve:
    """Time ``step(m)`` (one gradient computation at batch m, returning its seconds, the
    emulated slowdown included) at every size: one untimed warm-up each, then ``rounds``
    rounds over the sizes (alternately ascending and descending, so a drift in the machine's
    load touches every size alike), each a window of at least two steps and
    ``seconds / (rounds len(sizes))``. A size's capacity is the best window's samples over its
    seconds: a window rather than a step, so that a CPU quota's throttled periods count; the
    best window, so that a burst of someone else's load on a shared machine does not."""
    if not sizes:
        return []
    each = seconds / (rounds * len(sizes))
    for m in sizes:
        step(m)  # warm-up: allocator and kernels for this shape
    best = dict.fromkeys(sizes, 0.0)
    for r in range(rounds):
        for m in sizes if r % 2 == 0 else sizes[::-1]:
            window, n = 0.0, 0
            while n < 2 or window < each:
                window += step(m)
                n += 1
            best[m] = max(best[m], m * n / window)
    return [(m, best[m]) for m in sizes]


def from_profile(template: str, host: str) -> Curve | None:
    """The ``throughput`` of the profile at ``template`` ("{host}" filled), or None (logged)
    when there is none usable."""
    path = Path(template.replace("{host}", host)).expanduser()
    try:
        data = read_profile(path)
    except ProfileError as exc:
        log.warning("no usable profile at %s (%s): timing a pilot instead", path, exc)
        return None
    curve = [
        (int(b), float(c))
        for b, c in data.get("throughput", {}).items()
        if str(b).isdigit() and isinstance(c, (int, float)) and c > 0
    ]
    if not curve:
        log.warning("profile %s has no throughput: timing a pilot instead", path)
        return None
    return sorted(curve)
