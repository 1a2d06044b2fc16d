"""A model's parameters as one flat vector: gradients out, update directions and weights in."""

from __future__ import annotations

import torch


class Flat:
    """The parameters of a model in a fixed order, viewed as one vector of length ``n``."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.sizes = [p.numel() for p in params]
        self.n = sum(self.sizes)

    @property
    def nbytes(self) -> int:
        return 4 * self.n  # float32 on the wire

    def grad(self) -> torch.Tensor:
        """The gradients as a new flat vector (zero where a parameter has none)."""
        return torch.cat(
            [
                p.grad.detach().reshape(-1) if p.grad is not None else torch.zeros_like(p).view(-1)
                for p in self.params
            ]
        )

    def set_grad(self, v: torch.Tensor) -> None:
        """Make ``v`` the parameters' gradients (what the optimiser steps on)."""
        for p, chunk in zip(self.params, v.split(self.sizes), strict=True):
            if p.grad is None:
                p.grad = chunk.detach().view_as(p).clone()
            else:
                p.grad.copy_(chunk.view_as(p))

    def weights(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    @torch.no_grad()
    def load(self, v: torch.Tensor) -> None:
        for p, chunk in zip(self.params, v.split(self.sizes), strict=True):
            p.copy_(chunk.view_as(p))
