"""Snapshots for the accuracy curve: when a stage sends its weights to the evaluator, and how.

After the backward of global microbatch g (counted from the run's start, 1-based) every stage
holds the weights that absorbed microbatches 1..g; the set of every stage's weights at the same
g is a consistent model, named by g. Stages send theirs, unit by unit (so at most one unit is
copied at a time), every ``snapshot_every`` microbatches and at each epoch's end; the evaluator
scores them after the run, so evaluation never competes with training for CPU. A snapshot's
time is the largest stage training clock at it (each stage's clock leaves out the time it spent
sending snapshots)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgetrain.pipeline import messages

if TYPE_CHECKING:
    from edgetrain.pipeline.stage_build import Stage
    from edgetrain.pipeline.stage_channels import Links


def due(absorbed: int, every: int) -> bool:
    """Is a periodic snapshot due after ``absorbed`` microbatches? Pure."""
    return every > 0 and absorbed > 0 and absorbed % every == 0


def send(
    links: Links,
    stage: Stage,
    part: int,
    parts: int,
    epoch: int,
    absorbed: int,
    train_s: float,
    epoch_end: bool,
) -> int:
    """Send ``stage``'s newest weights and float buffers, one message per unit, on the
    ``snap`` outbox; returns the messages sent."""
    store = stage.store
    for u, unit in enumerate(stage.units):
        tensors = {
            unit.state_name(k): t.detach().cpu().numpy().copy() for k, t in store.newest(u).items()
        }
        for local, b in unit.module.named_buffers():
            if b.is_floating_point():
                tensors[unit.state_name(local)] = b.detach().cpu().numpy().copy()
        meta = {
            "snap": absorbed,
            "epoch": epoch,
            "mb": absorbed,
            "part": part,
            "parts": parts,
            "units": len(stage.units),
            "unit": u,
            "train_s": train_s,
            "epoch_end": epoch_end,
        }
        links.send("snap", messages.SNAP, meta, tensors, epoch, absorbed)
    return len(stage.units)
