"""A worker's side of a run that rewinds (:mod:`edgetrain.comm.rewind`): which peers' loss
halts it, the halt itself, and the rewinds it took part in. Shared by every runner that
rewinds (pipeline stages and replicas, Mercury devices)."""

from __future__ import annotations

from edgetrain.comm.rewind import Rewind
from edgetrain.runtime.session import Rewound, Session


class RewindWatch:
    """Raises :class:`Rewind` (from the session's poll, in the training thread) when a
    watched peer is lost; :meth:`halt` waits for the coordinator's rewind."""

    def __init__(self, who: str) -> None:
        self.who = who  # names this worker in the Rewind's message
        self.peers: set[int] = set()  # the workers whose loss halts this one
        self.armed = False  # off while halted: a second loss then waits for the rewind
        self.rewinds = 0  # rewinds to a checkpoint this process took part in
        self.rewound_s = 0.0  # the training time they threw away, and the halts' waits

    def watch(self, session: Session, role: str) -> bool:
        """In a run that rewinds, watch every worker of ``role``; whether the run rewinds."""
        if not session.rewinds:
            return False
        self.peers = {m.id for m in session.roster.of(role)}
        session.on_failed(self._failed)
        self.armed = True
        return True

    def _failed(self, failed: set[int]) -> None:
        lost = failed & self.peers
        if self.armed and lost:
            raise Rewind(f"{self.who}: workers {sorted(lost)} were lost")

    def halt(self, session: Session) -> Rewound:
        """Say this worker halted and wait for the coordinator's rewind."""
        self.armed = False
        rewound = session.halt()
        self.armed = True
        return rewound

    def count(self, seconds: float) -> None:
        """One rewind done, ``seconds`` after the training clock last counted."""
        self.rewinds += 1
        self.rewound_s += seconds
