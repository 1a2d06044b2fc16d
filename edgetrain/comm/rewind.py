"""Rewinding a run to its last checkpoint when a worker it cannot lose comes back (the
pipeline family under ``[run] restart``), as pure rules the coordinator and the workers ask.

A pipeline cannot train around a lost stage, and a stage's live state exists nowhere else. So
when a stage is lost, every other epoch-role worker stops where it is and says so (``halted``);
once the launcher's new process of the lost stage has set up from the last checkpoint, the
coordinator sends every survivor its own part of that checkpoint (``rewind``) and starts the
new process at the epoch after it. Every process then trains the same epochs again from the
same state, so the run ends with the model an undisturbed run ends with, bit for bit (on a
deterministic device); it costs the epochs since the checkpoint (``[run] checkpoint_every = 1``
loses at most one).

Each rewind starts a new *generation*: the workers stamp their epoch ends, checkpoints, done
reports and the messages between them with it, and what carries an older one (sent before the
sender heard of the loss) is dropped as stale.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

GEN = "gen"  # the meta key of a message's generation


class Rewind(Exception):
    """Worker side: a worker this one trains with was lost; training unwinds to where the
    worker halts and waits for the coordinator's rewind."""


def gen_of(meta: Mapping[str, Any]) -> int:
    """The generation a message carries (0 when it carries none or a malformed one). Pure."""
    value = meta.get(GEN, 0)
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else 0


def can_rewind(
    survivors: Iterable[int],
    halted: Collection[int],
    lost: Iterable[int],
    joining: Mapping[int, bool],
) -> bool:
    """May the coordinator rewind now? Every surviving epoch-role worker (``survivors``) has
    halted, no epoch-role worker is lost (``lost``: failed, not yet registered again), and
    every one on its way back (``joining``: worker -> set up) is set up; at least one is.
    Pure."""
    if any(True for _ in lost) or not joining or not all(joining.values()):
        return False
    return all(i in halted for i in survivors)


def rewind_epoch(points: Iterable[int | None], resumed_after: int) -> int:
    """The epoch the run rewinds to: the workers' last checkpoint (every point the same), or
    the epoch the run started after when there is none yet (``resumed_after``: 0 for a fresh
    run: the seeded start). Raises ValueError when the points disagree. Pure."""
    epochs = {p for p in points if p is not None}
    if len(epochs) > 1:
        raise ValueError(f"the workers' last checkpoints disagree: epochs {sorted(epochs)}")
    return epochs.pop() if epochs else resumed_after
