"""Build what a run trains on from its recipe: the dataset, a worker's partition, the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from edgetrain.recipe import Recipe

if TYPE_CHECKING:
    from torch import nn

    from edgetrain.data import Dataset


def load_run_data(recipe: Recipe) -> Dataset:
    from edgetrain.data import load_dataset

    return load_dataset(recipe.data, recipe.run.seed)


def partitions(recipe: Recipe, data: Dataset) -> list[np.ndarray]:
    """The recipe's partition of the training split: one index array per worker."""
    from edgetrain.data import partition_indices

    return partition_indices(
        data.y_train,
        recipe.num_workers,
        recipe.data.partition,
        recipe.run.seed,
        alpha=recipe.data.alpha,
        fractions=recipe.data.fractions,
    )


def worker_indices(recipe: Recipe, data: Dataset, worker_id: int) -> np.ndarray:
    """Indices into the training split that this worker trains on."""
    return partitions(recipe, data)[worker_id]


def build_run_model(recipe: Recipe, data: Dataset) -> nn.Module:
    """The recipe's model, seeded so that every worker starts from the same weights."""
    import torch

    from edgetrain.models import build_model

    torch.manual_seed(recipe.run.seed)
    return build_model(recipe.model.name, data.input_shape, data.classes, recipe.model.options)
