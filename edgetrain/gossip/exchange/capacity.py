"""A worker's capacity curve C(m), samples/s at batch size m, for DLion's batch planner and
Ako's partition count: a pilot of timed gradient steps before training, or the ``throughput``
of ``edgetrain profile`` run on the worker's host (gossip.md B.3: pre-profiling)."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from edgetrain.profile.schema import ProfileError, read_profile

log = logging.getLogger(__name__)

Curve = list[tuple[int, float]]


def pilot_sizes(b0: int) -> list[int]:
    """The batch sizes a pilot times, b0 / 8 to 4 b0: the planner's range, where a slow
    worker's batch shrinks and a fast one's grows (extrapolating a step's fixed cost misleads)."""
    return sorted({max(1, b0 // 8), max(1, b0 // 4), max(1, b0 // 2), b0, 2 * b0, 4 * b0})


def pilot(
    step: Callable[[int], float],
    sizes: list[int],
    seconds: float,
    rounds: int = 2,
    max_rounds: int = 4,
    tolerance: float = 0.15,
    cpu: Callable[[], float] | None = None,
) -> Curve:
    """Time ``step(m)`` (one gradient computation at batch m, returning its seconds, the
    emulated slowdown included) at every size: one untimed warm-up each, then rounds over the
    sizes (alternately ascending and descending, so a drift in the machine's load touches every
    size alike), each a window of at least two steps and ``seconds / (rounds len(sizes))``.
    A window rather than a step, so that a CPU quota's throttled periods count.

    At least ``rounds`` rounds; more (up to ``max_rounds``) until every size's two best windows
    agree within ``tolerance``: repeated until stable. A size's capacity is its best window's
    samples over its seconds, so that a burst of someone else's load does not count.

    ``cpu``: the stepping thread's CPU clock (a CPU device, one thread). A window then also
    counts the CPU its steps took, and a size's capacity is its best window's samples per CPU
    second times the pilot's CPU share: its CPU over its wall time across every window. A window
    of a fraction of a second holds a few of a quota's periods (0.3 core every 100 ms: 30 ms
    running, 70 stalled), so its wall time varies with where the stalls fell (some 30% on
    LeNet-5 in 0.33 s windows) and the best window of each size was the luckiest; the share over
    the whole pilot spans tens of periods, and CPU per step has no stalls in it."""
    if not sizes:
        return []
    each = seconds / (rounds * len(sizes))
    for m in sizes:
        step(m)  # warm-up: allocator and kernels for this shape
    seen: dict[int, list[float]] = {m: [] for m in sizes}
    walls, cpus = 0.0, 0.0
    r = 0
    while r < rounds or (r < max_rounds and not _stable(seen, tolerance)):
        for m in sizes if r % 2 == 0 else sizes[::-1]:
            window, n = 0.0, 0
            cpu0 = cpu() if cpu is not None else 0.0
            while n < 2 or window < each:
                window += step(m)
                n += 1
            if cpu is None:
                seen[m].append(m * n / window)
                continue
            spent = max(cpu() - cpu0, 1e-9)
            walls, cpus = walls + window, cpus + spent
            seen[m].append(m * n / spent)
        r += 1
    share = cpus / walls if cpu is not None and walls > 0 else 1.0
    return [(m, max(seen[m]) * share) for m in sizes]


def _stable(seen: dict[int, list[float]], tolerance: float) -> bool:
    """Every size's two best windows within ``tolerance`` of the best."""
    for values in seen.values():
        if len(values) < 2:
            return False
        best, second = sorted(values, reverse=True)[:2]
        if second < best * (1.0 - tolerance):
            return False
    return True


@contextmanager
def one_pilot_at_a_time(lock_dir: str | None = None) -> Iterator[float]:
    """Hold this machine's pilot lock while a pilot runs (yields the seconds waited for it):
    workers on one machine measure one after another, so that no worker's pilot is disturbed
    by another's (their relative capacities are what the batch plan needs). A machine without
    ``fcntl`` (or a lock file it cannot open) measures at once, as before."""
    started = time.perf_counter()
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield 0.0
        return
    folder = Path(lock_dir or tempfile.gettempdir())
    try:
        fh = open(folder / f"edgetrain-pilot-{os.getuid()}.lock", "a+b")  # noqa: SIM115
    except OSError as exc:
        log.warning("no pilot lock in %s (%s): measuring alongside other workers", folder, exc)
        yield 0.0
        return
    with fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield time.perf_counter() - started
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


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
