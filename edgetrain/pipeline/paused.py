"""Time a stage waited on a neighbour's pause is not training time either.

A stage that sends a snapshot to the evaluator stops its clock meanwhile; its neighbours do
not stop, they wait for its next activation or error, and before this ledger that wait was
counted as their training time (and their bubble). Each activation and error carries the
sender's cumulative out-of-clock seconds (``paused_s``: its own snapshot time plus the waits
it attributed so), and the receiver attributes to the sender's pause ``min(its own wait for
the message, the growth of the sender's paused_s since its previous message)``. Along a chain
of stages a pause propagates: the middle stage's attributed wait is in the ``paused_s`` it
sends on. On the emulated testbed this was about 15% of a two-stage run's clock at a snapshot
every 45 microbatches, a cost Local's clock never carried. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PauseLedger:
    """One stage's waits attributed to its neighbours' pauses."""

    held_s: float = 0.0
    seen: dict[str, float] = field(default_factory=dict)

    def attribute(self, sender: str, paused: Any, waited: float) -> float:
        """Attribute part of ``waited`` seconds (the wait for ``sender``'s message) to the
        growth of ``sender``'s ``paused_s``; return the seconds attributed. A value that is not
        a finite number, or that went back, is ignored (nothing from the network is trusted):
        no time is attributed to it."""
        if isinstance(paused, bool) or not isinstance(paused, (int, float)):
            return 0.0
        value = float(paused)
        last = self.seen.get(sender, 0.0)
        if not math.isfinite(value) or value < last:
            return 0.0
        self.seen[sender] = value
        held = min(max(waited, 0.0), value - last)
        self.held_s += held
        return held
