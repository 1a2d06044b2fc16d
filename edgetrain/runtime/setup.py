"""Build what a run trains on from its recipe: the dataset, a worker's shard of it, the model."""

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
    """The recipe's partition of the training split: one index array per worker that trains on
    data (the family's data roles), in worker-id order."""
    from edgetrain.data import partition_indices

    return partition_indices(
        data.y_train,
        recipe.num_data_workers,
        recipe.data.partition,
        recipe.run.seed,
        alpha=recipe.data.alpha,
        fractions=recipe.data.fractions,
    )


def data_shard(recipe: Recipe, worker_id: int) -> int | None:
    """Which shard of the partition worker ``worker_id`` trains on (None: its role has none)."""
    data_roles = recipe.family_spec.data_roles
    shard = 0
    for wid, role in enumerate(recipe.role_names()):
        if role in data_roles:
            if wid == worker_id:
                return shard
            shard += 1
    return None


def worker_indices(recipe: Recipe, data: Dataset, worker_id: int) -> np.ndarray:
    """Indices into the training split that this worker trains on (empty: none)."""
    shard = data_shard(recipe, worker_id)
    if shard is None:
        return np.zeros(0, dtype=np.int64)
    return partitions(recipe, data)[shard]


def build_run_model(recipe: Recipe, data: Dataset) -> nn.Module:
    """The recipe's model, seeded so that every worker starts from the same weights."""
    return seeded_model(recipe, data.input_shape, data.classes)


def seeded_model(recipe: Recipe, input_shape: tuple[int, int, int], classes: int) -> nn.Module:
    """:func:`build_run_model` from the data's shape and classes alone (a process that let its
    data go builds the same weights again)."""
    import torch

    from edgetrain.models import build_model

    torch.manual_seed(recipe.run.seed)
    return build_model(recipe.model.name, input_shape, classes, recipe.model.options)
