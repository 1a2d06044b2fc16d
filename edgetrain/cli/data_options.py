"""The data flags that ``edgetrain data inspect`` and ``edgetrain aggregate`` share: which
dataset, where it lives, how it is split across workers; and the recipe they resolve to."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from edgetrain.errors import DataError

if TYPE_CHECKING:
    import numpy as np

    from edgetrain.recipe import Recipe


class DatasetName(str, Enum):
    digits = "digits"
    mnist = "mnist"
    fashion_mnist = "fashion-mnist"
    cifar10 = "cifar10"
    synthetic = "synthetic"


class PartitionMethod(str, Enum):
    iid = "iid"
    dirichlet = "dirichlet"
    fractions = "fractions"


DatasetOption = Annotated[DatasetName | None, typer.Option(help="Dataset (default: digits).")]
RootOption = Annotated[
    str | None, typer.Option(help="Dataset directory (mnist, fashion-mnist, cifar10).")
]
PartitionOption = Annotated[
    PartitionMethod | None, typer.Option(help="How to split across workers (default: iid).")
]
FractionsOption = Annotated[
    str | None, typer.Option(help="Comma-separated shares for --partition fractions.")
]


def parse_fractions(text: str) -> list[float]:
    """``--fractions 0.5,0.3,0.2`` as numbers."""
    try:
        return [float(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise DataError(
            f"--fractions '{text}' is not a comma-separated list of numbers",
            "write e.g. --fractions 0.5,0.3,0.2",
        ) from None


def data_flags(
    dataset: DatasetName | None,
    root: str | None,
    partition: PartitionMethod | None,
    alpha: float | None,
    fractions: str | None,
) -> dict[str, Any]:
    """The ``[data]`` values the flags set (None: not given)."""
    return {
        "dataset": dataset.value if dataset is not None else None,
        "root": root,
        "partition": partition.value if partition is not None else None,
        "alpha": alpha,
        "fractions": parse_fractions(fractions) if fractions is not None else None,
    }


def build_recipe(
    recipe_path: Path | None, overrides: dict[str, Any], workers: int | None, seed: int | None
) -> Recipe:
    """The recipe file (or defaults) with the command line's flags applied, validated."""
    from edgetrain.recipe import load_recipe, parse_recipe

    base: dict[str, Any] = {"workers": [{"count": 4}]}
    if recipe_path is not None:
        base = load_recipe(recipe_path, check_paths=False)[0].to_dict()
    data = dict(base.get("data", {}))
    data.update({k: v for k, v in overrides.items() if v is not None})
    if data.get("dataset") in ("mnist", "fashion-mnist", "cifar10") and not data.get("root"):
        raise DataError(f"dataset '{data['dataset']}' needs its directory", "pass --root DIR")
    if workers is not None:
        base["workers"] = [{"count": workers}]
    if seed is not None:
        base["run"] = {**base.get("run", {}), "seed": seed}
    return parse_recipe({**base, "data": data}, str(recipe_path or "command line"))


def run_partitions(recipe: Recipe, labels: np.ndarray) -> list[np.ndarray] | None:
    """Each data worker's indices into the training split, by the same call the workers make
    (:func:`edgetrain.data.partition_indices`); None when the recipe's family has no role that
    trains on a shard (the pipeline: the whole split feeds the run)."""
    from edgetrain.data import partition_indices

    if recipe.num_data_workers == 0:
        return None
    return partition_indices(
        labels,
        recipe.num_data_workers,
        recipe.data.partition,
        recipe.run.seed,
        alpha=recipe.data.alpha,
        fractions=recipe.data.fractions,
    )


def whole_split_feed(recipe: Recipe) -> str:
    """Who draws from the whole training split in a run whose family shards nothing."""
    roles = recipe.role_names()
    replicas = roles.count("replica")
    if replicas:
        return (
            f"each of the {replicas} replicas trains on its 1/{replicas} slice of every "
            "microbatch, drawn from the whole training split"
        )
    if recipe.train.family == "pipeline":
        return "stage 0 draws every microbatch from the whole training split"
    return "every worker draws from the whole training split"
