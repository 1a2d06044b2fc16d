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
    """The batch sizes a pilot times: around b0, up to 4 b0 (the planner's likely range)."""
    return sorted({max(1, b0 // 2), b0, 2 * b0, 4 * b0})


def pilot(step: Callable[[int], float], sizes: list[int], seconds: float) -> Curve:
    """Time ``step(m)`` (one gradient computation at batch m, returning its seconds, the
    emulated slowdown included) at every size: one untimed warm-up each, then two rounds over
    the sizes (ascending, then descending, so a drift in the machine's load touches every
    size alike), each size at least two steps and ``seconds / (2 len(sizes))`` a round. A
    size's capacity is its samples over its seconds, both rounds together: a window, not the
    median step, so that a CPU quota's throttled periods count."""
    if not sizes:
        return []
    each = seconds / (2 * len(sizes))
    for m in sizes:
        step(m)  # warm-up: allocator and kernels for this shape
    spent = dict.fromkeys(sizes, 0.0)
    steps = dict.fromkeys(sizes, 0)
    for order in (sizes, sizes[::-1]):
        for m in order:
            window, n = 0.0, 0
            while n < 2 or window < each:
                window += step(m)
                n += 1
            spent[m] += window
            steps[m] += n
    return [(m, m * steps[m] / spent[m]) for m in sizes]


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
