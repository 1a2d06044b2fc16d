"""A server's synchronous aggregation of one tensor's gradients, in trainer order. Pure.

Iteration i's gradient of a tensor is applied once every live trainer has pushed it; the sum
runs over the trainers in id order whatever the order the pushes arrived in, so the weights
cannot depend on timing or on the schedule. A trainer that fails is dropped: what waited only
for it is released (its own pushes of unfinished iterations are discarded). A trainer that
rejoins is added back from the next iteration applied. A gradient may come unjoined (a tensor
of several frames, :class:`~edgetrain.comm.wire.Chunked`): the sum reads its frames in place.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

import numpy as np

from edgetrain.comm.wire import Chunked

Grad = np.ndarray | Chunked
T = TypeVar("T")


def keep(
    pending: dict[int, dict[int, T]],
    next_iteration: int,
    iteration: int,
    sender: int,
    grad: T,
    what: str,
) -> str | None:
    """Keep ``sender``'s ``grad`` of ``iteration`` in ``pending`` (by iteration, then sender)
    when it is the next iteration or the one after and the first from ``sender``; else why not
    (``stale_``, ``early_`` or ``duplicate_`` ``what``, a counter reason)."""
    if iteration < next_iteration:
        return f"stale_{what}"
    if iteration > next_iteration + 1:
        return f"early_{what}"
    got = pending.setdefault(iteration, {})
    if sender in got:
        return f"duplicate_{what}"
    got[sender] = grad
    return None


def survivor_scale(live: int, trainers: int, mode: str) -> float:
    """The learning-rate factor of an update while only ``live`` of the run's ``trainers``
    push: ``live / trainers`` with ``mode = "scaled"`` (the linear scaling rule: the mean over
    fewer trainers is a gradient over fewer samples, so a smaller step), else 1. Pure."""
    if mode != "scaled" or trainers <= 0 or live >= trainers:
        return 1.0
    return max(live, 0) / trainers


class Aggregator:
    """Pending pushes of one tensor, by iteration and trainer."""

    def __init__(self, trainers: Iterable[int], first_iteration: int = 0) -> None:
        self.trainers = set(trainers)
        self.next = first_iteration  # the iteration whose update is applied next
        self._pending: dict[int, dict[int, Grad]] = {}

    def push(self, iteration: int, trainer: int, grad: Grad) -> str | None:
        """Take a push; returns why it is refused (a counter reason), or None."""
        if trainer not in self.trainers:
            return "unknown_trainer"
        # BSP: a trainer cannot be two iterations ahead
        return keep(self._pending, self.next, iteration, trainer, grad, "push")

    def ready(self) -> np.ndarray | None:
        """The mean gradient of the next iteration once every live trainer pushed it (and
        the iteration advances), else None."""
        got = self._pending.get(self.next, {})
        if not self.trainers or not self.trainers <= set(got):
            return None
        order = sorted(self.trainers)
        first = got[order[0]]
        if isinstance(first, Chunked):
            total = first.join()
        else:
            total = np.array(first, dtype=np.float32, copy=True)
        for t in order[1:]:
            grad = got[t]
            if isinstance(grad, Chunked):
                grad.add_to(total)
            else:
                total += grad
        total /= np.float32(len(order))
        del self._pending[self.next]
        self.next += 1
        return total

    def drop(self, trainer: int) -> None:
        """A trainer failed: stop waiting for it."""
        self.trainers.discard(trainer)
        for got in self._pending.values():
            got.pop(trainer, None)

    def add(self, trainer: int) -> int:
        """A trainer rejoined: wait for it again from the next iteration applied (its pushes
        of earlier ones are stale). Returns that iteration."""
        self.trainers.add(trainer)
        return self.next


class StaleClock:
    """Stale-synchronous bookkeeping of one tensor: how many iterations each trainer has pushed.

    Under SSP a push is applied as it arrives, so the tensor's *version* is not the number of
    updates applied but the number of iterations every live trainer has pushed (the slowest
    trainer's clock). A pull for iteration i waits while that is below ``i - staleness``, which
    bounds how far the fastest trainer runs ahead of the slowest; counting applied updates
    instead would let a trainer alone advance the version and the bound would never hold.
    """

    def __init__(self, trainers: Iterable[int], first_iteration: int = 0) -> None:
        self.pushed = dict.fromkeys(trainers, first_iteration)  # next iteration each one pushes

    def push(self, iteration: int, trainer: int) -> str | None:
        """Take trainer's push of ``iteration``; returns why it is refused, or None."""
        expected = self.pushed.get(trainer)
        if expected is None:
            return "unknown_trainer"
        if iteration < expected:
            return "stale_push"
        if iteration > expected:
            return "early_push"  # a trainer pushes its iterations in order
        self.pushed[trainer] = iteration + 1
        return None

    @property
    def version(self) -> int:
        """Iterations every live trainer has pushed (0 when none is left)."""
        return min(self.pushed.values(), default=0)

    def drop(self, trainer: int) -> None:
        """A trainer failed: the slowest live clock no longer counts it."""
        self.pushed.pop(trainer, None)

    def add(self, trainer: int) -> int:
        """A trainer rejoined: its clock starts at the slowest live one's (its pushes of
        earlier iterations are stale). Returns that iteration."""
        start = self.version
        self.pushed[trainer] = start
        return start
