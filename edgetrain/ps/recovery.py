"""A lost parameter-server shard rebuilt from the trainers' replicas (``[run] restart``). Pure.

Every trainer holds the whole model: each pull copies the shard's tensors into its parameters.
When a shard's process dies, its restarted process asks nothing of the disk but the optimiser:
each live trainer reconnects and sends first a ``ps.state`` (:mod:`.messages`) with its copy of
the shard's tensors, the version each was pulled at, and the last iteration whose push of each
was acknowledged by every shard. The new shard takes every tensor from the freshest copy (the
highest version; on a tie the lowest trainer id) at that version (:func:`rebuild`), then the
trainers send again what the dead shard had not answered, and the pushes it had acknowledged
whose update no trainer has pulled yet (each trainer keeps those, :class:`KeptPushes`).

Under BSP the result is exact: an update is applied once every trainer pushed it, so an update
the dead shard applied but nobody pulled is applied again from the same pushes, and nothing
else is lost. What is not rebuilt is the optimiser's state (momentum), which only the shard held:
it starts again from zero. Under SSP pushes apply as they arrive, so a push in flight when the
shard died may count twice or not at all; each trainer's clock restarts after its last
acknowledged push (:func:`rebuild`'s ``clocks``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgetrain.comm.wire import Chunked, float32_problem, is_count


@dataclass(frozen=True)
class Replica:
    """What one trainer holds of a shard: the version of each tensor's last pull, and the last
    iteration of each tensor whose push every shard acknowledged."""

    versions: Mapping[str, int]
    pushed: Mapping[str, int]


@dataclass(frozen=True)
class Rebuilt:
    """A shard's tensors after a rebuild: whose copy each is taken from (absent: nobody holds
    one; the shard keeps its checkpoint's or initial value), the version of each, and under
    SSP each trainer's clock per tensor (the next iteration it pushes)."""

    source: dict[str, int]
    version: dict[str, int]
    clocks: dict[str, dict[int, int]]


def rebuild(
    names: Sequence[str], replicas: Mapping[int, Replica], fallback: Mapping[str, int]
) -> Rebuilt:
    """Each tensor from its freshest copy among ``replicas`` (by trainer); a tensor nobody holds
    keeps the version in ``fallback``. A trainer's SSP clock of a tensor starts after its last
    acknowledged push, and never below the rebuilt version (its pushes before that are in
    every copy pulled at that version). Pure."""
    source: dict[str, int] = {}
    version: dict[str, int] = {}
    clocks: dict[str, dict[int, int]] = {}
    for n in names:
        held = [(r.versions[n], -t) for t, r in replicas.items() if n in r.versions]
        if held:
            best, minus_t = max(held)
            source[n], version[n] = -minus_t, best
        else:
            version[n] = fallback.get(n, 0)
        clocks[n] = {
            t: max(version[n], r.pushed[n] + 1 if n in r.pushed else version[n])
            for t, r in replicas.items()
        }
    return Rebuilt(source, version, clocks)


def state_problem(
    meta: Mapping[str, Any],
    tensors: Mapping[str, np.ndarray | Chunked],
    owned: set[str],
    shapes: Mapping[str, tuple[int, ...]],
    layout: str,
) -> str | None:
    """Why a ``ps.state`` is unusable (a counter reason), or None: this layout, ``names`` (may
    be empty) the shard owns, a version for each, an acknowledged iteration for owned tensors
    only, and exactly those tensors, float32 of their shapes, finite."""
    if meta.get("layout") != layout:
        return "wrong_layout"
    names, versions, pushed = meta.get("names"), meta.get("versions"), meta.get("pushed")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return "bad_state"
    if len(set(names)) != len(names) or not set(names) <= owned:
        return "bad_state"
    if not isinstance(versions, dict) or set(versions) != set(names):
        return "bad_state"
    if not isinstance(pushed, dict) or not set(pushed) <= owned:
        return "bad_state"
    if not all(is_count(v) for v in (*versions.values(), *pushed.values())):
        return "bad_state"
    if set(tensors) != set(names):
        return "bad_state"
    for n in names:
        reason = float32_problem(tensors[n], shapes[n])
        if reason is not None:
            return reason
    return None


class KeptPushes:
    """A trainer's last acknowledged push of each tensor, kept until a pull shows its update
    applied (a version above its iteration): what a rebuilt shard may need again.

    The arrays are the pushed gradients themselves (no copy): a push is released before the
    next backward pass can make new gradients (that pass waits for the pull that releases it),
    so keeping them costs no memory at the peak under BSP."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[int, np.ndarray]] = {}

    def pushed(self, iteration: int, arrays: Mapping[str, np.ndarray]) -> None:
        for n, arr in arrays.items():
            self._kept[n] = (iteration, arr)

    def pulled(self, names: Sequence[str], version: int) -> None:
        """A pull brought ``names`` at ``version``: pushes of earlier iterations are applied."""
        for n in names:
            got = self._kept.get(n)
            if got is not None and got[0] < version:
                del self._kept[n]

    def of(self, names: Sequence[str], skip: set[str]) -> dict[int, dict[str, np.ndarray]]:
        """The kept pushes of ``names`` but ``skip``, by iteration."""
        out: dict[int, dict[str, np.ndarray]] = {}
        for n in names:
            if n in self._kept and n not in skip:
                it, arr = self._kept[n]
                out.setdefault(it, {})[n] = arr
        return dict(sorted(out.items()))

    def __len__(self) -> int:
        return len(self._kept)
