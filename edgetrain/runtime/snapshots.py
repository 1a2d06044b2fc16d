"""Deferred evaluation (``[train] eval_deferred``): copies of a worker's model at the end of its
evaluation epochs, scored once training is over.

Evaluating at an epoch's end is already kept out of the training clock (``eval_s``), but on a
host with a CPU quota the evaluation still spends the quota: the next epoch's first steps then
stall until the quota refills, inside the clock. A snapshot is one copy of the model's state (a
fraction of a training step), so the hosts spend their CPU on training alone while the clock
runs; the worker scores every snapshot after its last epoch's training, and its last epoch's
report carries them (``deferred_eval``: ``[[epoch, accuracy, loss], ...]``), which the run's
report puts back on its epochs (:func:`edgetrain.report.summary.training_curve`).

Snapshots are held in host memory (one model's state each): epochs x the model's size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

DEFERRED = "deferred_eval"  # the epoch report's field: [[epoch, accuracy, loss], ...]


class Snapshots:
    """The snapshots of ``model`` taken so far; ``evaluate`` scores the model as it is."""

    def __init__(self, model: nn.Module, evaluate: Callable[[], tuple[float, float]]) -> None:
        self.model = model
        self.evaluate = evaluate
        self.held: list[tuple[int, dict[str, torch.Tensor]]] = []

    def take(self, epoch: int) -> None:
        """Keep a copy of the model's state as epoch ``epoch`` ends (in host memory)."""
        self.held.append((epoch, _copy(self.model)))

    def score(self) -> list[list[Any]]:
        """Score every snapshot held (then forget them) and put the model back as it was:
        ``[[epoch, accuracy, loss], ...]`` in the order taken."""
        if not self.held:
            return []
        now = _copy(self.model)
        out: list[list[Any]] = []
        try:
            for epoch, state in self.held:
                self.model.load_state_dict(state)
                acc, loss = self.evaluate()
                out.append([epoch, acc, loss])
        finally:
            self.model.load_state_dict(now)
            self.held.clear()
        return out


def _copy(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
