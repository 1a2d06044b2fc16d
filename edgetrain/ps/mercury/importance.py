"""Importance as Mercury computes it: each sample's feed-forward loss ([MC §3.1]).

The loss is computed under ``torch.no_grad()``. Models without BatchNorm or Dropout (MLP,
LeNet-5, cnn2) give the same numbers in train and eval mode, so ``auto`` leaves the mode
alone (another thread may be training); BatchNorm models score in train mode (batch
statistics, as the public code does) with their running statistics saved and restored, so
scoring never changes the training state (specs/ps.md §2.3.3).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

_MODE_SENSITIVE = (nn.modules.batchnorm._BatchNorm, nn.Dropout, nn.Dropout2d, nn.AlphaDropout)


def mode_sensitive(model: nn.Module) -> bool:
    return any(isinstance(m, _MODE_SENSITIVE) for m in model.modules())


class Scorer:
    """Per-sample cross-entropy of a model, in the loss mode of ``[mercury] loss_mode``."""

    def __init__(self, model: nn.Module, mode: str = "auto") -> None:
        self.model = model
        sensitive = mode_sensitive(model)
        if mode == "auto":
            mode = "train" if sensitive else "as-is"
        self.mode = mode if sensitive else "as-is"

    @property
    def as_training(self) -> bool:
        """Whether a score is the loss the training forward pass computes (train mode, or a
        model without BatchNorm and Dropout): the batch's own losses are then fresh scores."""
        return self.mode != "eval"

    @torch.no_grad()
    def losses(self, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
        model = self.model
        if self.mode == "as-is":
            out = model(x)
        else:  # eval or train mode; in train mode the BatchNorm buffers are restored
            training = self.mode != "eval"
            saved = {k: v.clone() for k, v in model.named_buffers()} if training else {}
            was = model.training
            model.train(training)
            try:
                out = model(x)
            finally:
                model.train(was)
                buffers = dict(model.named_buffers())
                for k, v in saved.items():
                    buffers[k].copy_(v)
        loss = nn.functional.cross_entropy(out, y, reduction="none")
        return loss.detach().cpu().numpy().astype(np.float64)
