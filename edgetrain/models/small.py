"""Small models for edge training: an MLP, LeNet-5, and DLion's 2-conv + 2-FC CNN."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from edgetrain.models.twin import cpu_twin, needs_twin


def _flat_features(features: nn.Module, input_shape: tuple[int, int, int]) -> int:
    """Elements per sample out of ``features``: on a CPU twin when built on the meta device
    (:mod:`edgetrain.models.twin`)."""
    if needs_twin([features]):
        features = cpu_twin(features)
    device = next(features.parameters()).device
    with torch.no_grad():
        return int(features(torch.zeros(1, *input_shape, device=device)).numel())


def mlp(
    input_shape: tuple[int, int, int],
    num_classes: int,
    hidden: Sequence[int] = (128, 64),
    dropout: float = 0.0,
) -> nn.Module:
    """Flatten, then Linear + ReLU per hidden width, then a Linear classifier."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(input_shape)
    for h in hidden:
        layers += [nn.Linear(width, int(h)), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = int(h)
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def lenet5(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """LeNet-5: conv 6@5x5 (pad 2), pool, conv 16@5x5, pool, FC 120, 84, classes.

    A side smaller than 28 is resized up to 28 first (a parameter-free ``nn.Upsample``).
    """
    c, h, w = input_shape
    pre: list[nn.Module] = []
    size = (max(h, 28), max(w, 28))
    if size != (h, w):
        pre.append(nn.Upsample(size=size, mode="bilinear", align_corners=False))
    features = nn.Sequential(
        *pre,
        nn.Conv2d(c, 6, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
    )
    n = _flat_features(features, input_shape)
    return nn.Sequential(
        *features,
        nn.Linear(n, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, num_classes),
    )


def cnn2(input_shape: tuple[int, int, int], num_classes: int, width: int = 32) -> nn.Module:
    """DLion's test model: conv 32@3x3, pool, conv 64@3x3, pool, FC 128, FC classes."""
    c = input_shape[0]
    features = nn.Sequential(
        nn.Conv2d(c, width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
    )
    n = _flat_features(features, input_shape)
    return nn.Sequential(*features, nn.Linear(n, 128), nn.ReLU(), nn.Linear(128, num_classes))
