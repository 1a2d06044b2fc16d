"""The epoch loop every trainer-like runner shares: steps, progress, evaluation, checkpoints,
the barrier, and the end of training.

A technique supplies its :class:`EpochWork`: the minibatches of an epoch, one step (the
technique's exchange included), its extra metrics, its checkpoint hand-in, what to do with a
directive, and the sockets to keep serving while it waits at a barrier. The loop does the rest
the same way for every technique, so that their records compare like with like:

- ``epoch_s`` is the epoch's training time and ``eval_s`` its evaluation, measured apart, so
  reports can keep evaluation out of the training clock;
- with :class:`~edgetrain.runtime.snapshots.Snapshots` (``[train] eval_deferred``) an evaluation
  epoch before the last keeps a copy of the model instead, and the last epoch scores them all
  after its own evaluation (its report's ``deferred_eval``);
- a loss that is not finite stops the worker with :class:`~edgetrain.errors.Diverged`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from edgetrain.comm.client import Serve
from edgetrain.comm.control import HandIn
from edgetrain.errors import Diverged
from edgetrain.runtime.session import Session
from edgetrain.runtime.snapshots import DEFERRED, Snapshots


class EpochWork(Protocol):
    """What a technique does inside the shared epoch loop."""

    def batches(self, epoch: int) -> Iterable[Any]:
        """This epoch's minibatches, each passed to :meth:`step` as it is."""
        ...

    def step(self, epoch: int, batch: Any) -> float:
        """One training step on ``batch``, with the technique's exchange; returns the loss."""
        ...

    def evaluate(self) -> tuple[float, float]:
        """Test accuracy and loss of the current model."""
        ...

    def metrics(self) -> dict[str, Any]:
        """Extra metrics for the epoch's report (cumulative counters, state)."""
        ...

    def checkpoint(self) -> HandIn:
        """This worker's part of a checkpoint."""
        ...

    def apply(self, directive: Mapping[str, Any]) -> None:
        """Act on a directive from the coordinator (at start and at each barrier)."""
        ...

    def serve(self) -> Serve:
        """Sockets to keep serving (with their handlers) while waiting for the coordinator."""
        ...


def run_epochs(
    session: Session,
    work: EpochWork,
    *,
    epochs: int,
    start_epoch: int = 1,
    eval_every: int = 1,
    worker_id: int = 0,
    first_steps: int = 0,
    snapshots: Snapshots | None = None,
) -> int:
    """Train epochs ``start_epoch`` to ``epochs``; return the number of steps taken (counted
    from ``first_steps``: the steps before ``start_epoch``, where a rewind went back to).
    ``snapshots``: evaluation deferred to the end (see the module's docstring)."""
    work.apply(session.start_directive)
    steps = first_steps
    for epoch in range(start_epoch, epochs + 1):
        started = time.monotonic()
        losses: list[float] = []
        for batch in work.batches(epoch):
            session.poll()
            loss = work.step(epoch, batch)
            steps += 1
            if not math.isfinite(loss):
                raise Diverged(epoch, len(losses) + 1, worker_id)
            losses.append(loss)
            session.progress(epoch, len(losses), steps, loss=loss)
        train_s = time.monotonic() - started
        metrics: dict[str, Any] = {
            "loss": sum(losses) / len(losses) if losses else None,
            "epoch_steps": len(losses),
            "steps": steps,
            "epoch_s": train_s,
            **work.metrics(),
        }
        if snapshots is not None and epoch % eval_every == 0 and epoch != epochs:
            t0 = time.monotonic()
            snapshots.take(epoch)
            metrics["eval_s"] = time.monotonic() - t0
        elif epoch % eval_every == 0 or epoch == epochs:
            t0 = time.monotonic()
            acc, test_loss = work.evaluate()
            metrics.update(test_accuracy=acc, test_loss=test_loss)
            if snapshots is not None:
                metrics[DEFERRED] = snapshots.score()
            metrics["eval_s"] = time.monotonic() - t0
        else:
            metrics["eval_s"] = 0.0
        if session.checkpoint_due(epoch):
            session.checkpoint(epoch, steps, work.checkpoint())
        directive = session.end_epoch(epoch, steps, metrics, work.serve(), last=epoch == epochs)
        if directive:
            work.apply(directive)
    return steps
