"""The coordinator's rules for a worker that registers again after it was lost (a process the
launcher restarted, ``[run] restart``), as pure functions of what the coordinator knows.

A re-registration is authenticated like every worker message (the run's per-run secret, see
:mod:`edgetrain.comm.protocol`); these rules decide what happens to an authentic one:

- ``register``: the worker never registered; the normal start-up.
- ``rejoin``: it was lost while the run trains and the run takes workers back: it is welcomed
  again, sets up, and re-enters at the next epoch boundary (:func:`entry_epoch`).
- ``stop``: it was lost and cannot come back (the run does not take workers back, it refused
  its input or diverged, or training is over): it is told to stop, as a lost worker that
  speaks again always was.
- ``refuse``: it is in the run already (a second ``register``): dropped, counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Verdict = Literal["register", "rejoin", "stop", "refuse"]

# The error kind of an open slot (``[run] join_slots``) nobody has joined yet: a worker that
# has left from the start, which a new worker may take (:mod:`edgetrain.launch.slots`).
VACANT = "vacant"

# Failures a restart does not mend: the run stops on them anyway.
FINAL_KINDS = frozenset({"input", "diverged"})


def register_verdict(status: str, error_kind: str | None, phase: str, allowed: bool) -> Verdict:
    """What a ``register`` from a worker in ``status`` means while the run is in ``phase``. Pure."""
    if status == "pending":
        return "register"
    if status != "failed":
        return "refuse"
    if not allowed or error_kind in FINAL_KINDS or phase != "training":
        return "stop"
    return "rejoin"


def entry_epoch(
    barriers: bool, released: int | None, running_epochs: Sequence[int], epochs: int | None
) -> int | None:
    """The epoch a rejoining worker trains first, or None when there is none left to join.

    With barriers it enters with the epoch after the one just released (``released``; None:
    no barrier is being released now, so it waits for the next). Without barriers it enters
    after the slowest training worker's last ended epoch (``running_epochs``; none training:
    nothing to join). Pure."""
    if barriers:
        if released is None:
            return None
        first = released + 1
    else:
        if not running_epochs:
            return None
        first = min(running_epochs) + 1
    return None if epochs is not None and first > epochs else first
