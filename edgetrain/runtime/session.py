"""A worker's side of the run protocol, for runners: report, end epochs, drain, hand in.

A :class:`Session` starts with the coordinator's ``start`` (the roster and this worker's first
directive) and wraps the coordinator client: progress at most twice a second, checkpoints and
epoch ends with the barrier wait, the drain, the final hand-in. It also keeps what arrives
unasked: the peers that failed, and a drain directive sent again after a failure. Metrics that
are not finite travel as null, so a diverging run reports instead of crashing the wire.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from edgetrain.comm import activity, protocol
from edgetrain.comm.client import CoordinatorClient, Serve
from edgetrain.comm.control import HandIn
from edgetrain.comm.rewind import GEN, gen_of
from edgetrain.comm.wire import Message, is_count
from edgetrain.runtime.context import Final, Roster, WorkerContext

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 0.5
# A training loop polls the coordinator between steps; a poll costs a few microseconds, as much
# as a small step's bookkeeping, so it reads the socket at most this often (what it brings, a
# failed peer or a stop, is acted on a few milliseconds later at most).
POLL_INTERVAL_S = 0.002
# A worker waits at most this long for a barrier or the drain: the coordinator resends lost
# messages and the failure policy ends runs whose workers died, so this only ends a run whose
# coordinator is alive but wedged.
BARRIER_TIMEOUT_S = 6 * 3600.0


def finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


# the phase a role is in once the run starts (activity; every other role: training)
PHASES = {"server": "serving", "evaluator": "evaluating"}


class Session:
    """This worker's view of a started run."""

    def __init__(self, client: CoordinatorClient, ctx: WorkerContext, start: Message) -> None:
        self.client = client
        self.ctx = ctx
        self.roster = Roster.from_meta(start.meta.get("roster"))
        directive = start.meta.get("directive", {})
        self.start_directive: dict[str, Any] = directive if isinstance(directive, dict) else {}
        self.barriers = bool(start.meta.get("barriers", True))
        self.checkpoints = bool(start.meta.get("checkpoints", True))  # this worker's role
        self.failed: set[int] = set()
        self.drain_directive: dict[str, Any] | None = None
        self.drain_updates = 0
        self._on_failed: list[Callable[[set[int]], None]] = []
        self._on_joined: list[Callable[[dict[int, dict[str, str]]], None]] = []
        # A restarted worker re-entering the run: the epoch it trains first (None: a start).
        rejoin = start.meta.get("rejoin")
        first = rejoin.get("epoch") if isinstance(rejoin, dict) else None
        valid = isinstance(first, int) and not isinstance(first, bool) and first >= 1
        self.rejoin_epoch: int | None = first if valid else None
        # Rewinds (the pipeline family under [run] restart): whether a lost stage rewinds the
        # run instead of ending it, and this process's generation (rewinds it took part in).
        self.rewinds = start.meta.get("rewinds") is True
        self.gen = gen_of(rejoin) if isinstance(rejoin, dict) else 0
        self._last_progress = 0.0
        self._last_poll = 0.0
        client.on_message = self._unasked
        activity.set_phase(PHASES.get(ctx.role.name, "training"))

    # ------------------------------------------------------------------ unasked messages

    def on_failed(self, callback: Callable[[set[int]], None]) -> None:
        """Call ``callback`` with the failed workers whenever the coordinator names more."""
        self._on_failed.append(callback)

    def on_joined(self, callback: Callable[[dict[int, dict[str, str]]], None]) -> None:
        """Call ``callback`` with ``{worker: endpoints}`` whenever lost workers rejoin."""
        self._on_joined.append(callback)

    def _unasked(self, msg: Message) -> None:
        if msg.type == protocol.PEERS:
            joined = _joined(msg.meta.get("joined"))
            failed = msg.meta.get("failed", [])
            if joined:
                self.failed.difference_update(joined)
                log.info("workers %s rejoined", sorted(joined))
                for on_join in self._on_joined:
                    on_join(joined)
            if isinstance(failed, list) and not joined:
                self.failed.update(i for i in failed if isinstance(i, int))
                log.info("workers %s failed; going on without them", sorted(self.failed))
                for callback in self._on_failed:
                    callback(set(self.failed))
        elif msg.type == protocol.DRAIN:  # sent again: a worker failed while we drain
            self.drain_directive = _directive(msg)
            self.drain_updates += 1
            log.info("new drain directive after a failure: %s", self.drain_directive)

    def poll(self, force: bool = False) -> None:
        """Handle what the coordinator sent meanwhile (between steps; never blocks), at most
        every :data:`POLL_INTERVAL_S` seconds (``force``: now)."""
        now = time.monotonic()
        if not force and now - self._last_poll < POLL_INTERVAL_S:
            return
        self._last_poll = now
        self.client.dispatch()

    # ------------------------------------------------------------------ reporting

    def send(
        self,
        kind: str,
        meta: Mapping[str, Any],
        epoch: int = 0,
        step: int = 0,
        tensors: Mapping[str, Any] | None = None,
    ) -> None:
        self.client.send(
            kind, finite(dict(meta)), epoch=epoch, step=step, tensors=dict(tensors or {})
        )

    def progress(self, epoch: int, epoch_step: int, step: int, **fields: Any) -> None:
        """Report progress, at most every :data:`PROGRESS_INTERVAL_S` seconds."""
        now = time.monotonic()
        if now - self._last_progress < PROGRESS_INTERVAL_S:
            return
        self._last_progress = now
        self.send(protocol.PROGRESS, {"epoch_step": epoch_step, **fields}, epoch, step)

    def checkpoint_due(self, epoch: int) -> bool:
        """True if this worker hands in a part of the checkpoint of ``epoch``."""
        every = self.ctx.recipe.run.checkpoint_every
        due = bool(every) and epoch % every == 0 and epoch < self.ctx.recipe.train.epochs
        return due and self.checkpoints

    def checkpoint(self, epoch: int, step: int, handin: Any) -> None:
        """Hand in this worker's part of the checkpoint of ``epoch``."""
        meta = {"handin": handin.meta, **self._stamp()}
        self.send(protocol.CHECKPOINT, meta, epoch, step, handin.weights)

    def _stamp(self) -> dict[str, int]:
        """The generation, on a report of a run that rewinds."""
        return {GEN: self.gen} if self.rewinds else {}

    def halt(self) -> Rewound:
        """A worker this one trains with was lost (a run that rewinds): say this one stopped
        where it was, wait for the coordinator's rewind, and take its generation."""
        activity.set_phase("halted")
        self.send(protocol.HALTED, {GEN: self.gen})
        msg = self.client.wait_for(protocol.REWIND, BARRIER_TIMEOUT_S)
        rewound = Rewound.of(msg)
        self.gen = rewound.gen
        activity.set_phase(PHASES.get(self.ctx.role.name, "training"))
        return rewound

    def end_epoch(
        self,
        epoch: int,
        step: int,
        metrics: Mapping[str, Any],
        serve: Serve = (),
        last: bool = False,
    ) -> dict[str, Any]:
        """Report the end of ``epoch``; with barriers (and more epochs to come) wait for the
        coordinator's ``go`` and return its directive for the next epoch."""
        self.send(protocol.EPOCH_END, {**metrics, **self._stamp()}, epoch, step)
        if not self.barriers or last:
            return {}
        return _directive(self.client.wait_for(protocol.GO, BARRIER_TIMEOUT_S, serve))

    def done(
        self, meta: Mapping[str, Any], epoch: int, step: int, serve: Serve = ()
    ) -> dict[str, Any]:
        """Report that training is over; wait for and return the drain directive."""
        activity.set_phase("draining")
        self.send(protocol.DONE, {**meta, **self._stamp()}, epoch, step)
        return self.wait_drain(serve)

    def wait_drain(
        self, serve: Serve = (), idle: Callable[[], float] | None = None
    ) -> dict[str, Any]:
        """Wait for the drain directive (roles without epochs wait here from ``start``,
        serving their sockets; ``idle`` runs their timers, see ``wait_for``)."""
        msg = self.client.wait_for(protocol.DRAIN, BARRIER_TIMEOUT_S, serve, idle=idle)
        self.drain_directive = _directive(msg)
        return self.drain_directive

    def hand_in(self, final: Final, epoch: int, step: int) -> None:
        """Send the final hand-in with its metrics."""
        activity.set_phase("handing in")
        meta = {"handin": final.handin.meta, **final.metrics}
        self.send(protocol.FINAL, meta, epoch, step, final.handin.weights)


@dataclass(frozen=True)
class Rewound:
    """The coordinator's rewind: the checkpoint epoch to go back to, the new generation, the
    roster now (the lost workers' new endpoints) and this worker's part of the checkpoint
    (None: the seeded start)."""

    epoch: int
    gen: int
    roster: Roster
    handin: HandIn | None

    @classmethod
    def of(cls, msg: Message) -> Rewound:
        from edgetrain.errors import RunError

        epoch, meta = msg.meta.get("epoch"), msg.meta.get("handin")
        if not isinstance(epoch, int) or not is_count(epoch):
            raise RunError("the coordinator sent a malformed rewind")
        if not (meta is None or isinstance(meta, dict)):
            raise RunError("the coordinator sent a malformed rewind")
        handin = HandIn(dict(msg.tensors), meta) if meta is not None else None
        return cls(epoch, gen_of(msg.meta), Roster.from_meta(msg.meta.get("roster")), handin)


def _joined(value: Any) -> dict[int, dict[str, str]]:
    """``peers``'s rejoined workers, ``{"3": {"gossip": url}}``, with anything malformed left
    out."""
    if not isinstance(value, dict):
        return {}
    return {
        int(k): {str(n): u for n, u in v.items() if isinstance(u, str)}
        for k, v in value.items()
        if isinstance(k, str) and k.isdigit() and len(k) < 12 and isinstance(v, dict)
    }


def _directive(msg: Message) -> dict[str, Any]:
    value = msg.meta.get("directive", {})
    return value if isinstance(value, dict) else {}
