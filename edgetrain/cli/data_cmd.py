"""``edgetrain data``: inspect datasets and how a recipe partitions them across workers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit
from edgetrain.cli.data_options import (
    DatasetOption,
    FractionsOption,
    PartitionOption,
    RootOption,
    build_recipe,
    data_flags,
    run_partitions,
    whole_split_feed,
)

app = typer.Typer(help="Inspect datasets and their partitions.", no_args_is_help=True)

_MAX_CLASS_COLUMNS = 16


@app.callback()
def _data() -> None:
    """Inspect datasets and their partitions."""


def _render(report: dict[str, Any]) -> None:
    from rich import box
    from rich.table import Table

    shape = "x".join(map(str, report["input_shape"]))
    alpha = f" (alpha {report['alpha']:g})" if report["alpha"] is not None else ""
    console.print(
        f"[bold]{report['dataset']}[/]: {report['classes']} classes, input {shape}",
        soft_wrap=True,
    )
    console.print(f"samples: {report['train']} train / {report['test']} test", soft_wrap=True)
    whole = report["feed"] is not None
    if whole:
        console.print(f"partition: none, {report['feed']} (seed {report['seed']})", soft_wrap=True)
    else:
        console.print(
            f"partition: {report['partition']}{alpha} across {len(report['parts'])} workers, "
            f"seed {report['seed']}",
            soft_wrap=True,
        )
    per_class = report["classes"] <= _MAX_CLASS_COLUMNS
    title = "training samples the run draws from" if whole else "training samples per worker"
    table = Table(
        title=title + ((", by class" if whole else " and class") if per_class else ""),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("part", justify="right")
    table.add_column("size", justify="right")
    if per_class:
        for c in range(report["classes"]):
            table.add_column(str(c), justify="right")
    else:
        table.add_column("classes", justify="right")
    table.add_column("entropy", justify="right")
    table.add_column("TV", justify="right")
    for p in report["parts"]:
        balance = map(str, p["class_counts"]) if per_class else [str(p["classes_present"])]
        table.add_row(
            "all" if whole else str(p["part"]),
            str(p["size"]),
            *balance,
            f"{p['label_entropy_bits']:.2f}",
            f"{p['tv_distance']:.2f}",
        )
    console.print(table)
    console.print(
        f"entropy: label entropy in bits (max {report['max_entropy_bits']:.2f}); "
        "TV: distance from the overall class mix (0 balanced, 1 disjoint)",
        style="dim",
        soft_wrap=True,
    )


@app.command("inspect")
def inspect(
    recipe_path: Annotated[
        Path | None,
        typer.Argument(metavar="RECIPE", help="Recipe to take data, seed and workers from."),
    ] = None,
    dataset: DatasetOption = None,
    root: RootOption = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="Number of partitions (default: 4).")
    ] = None,
    partition: PartitionOption = None,
    alpha: Annotated[
        float | None, typer.Option(help="Dirichlet concentration: small is skewed (default 0.5).")
    ] = None,
    fractions: FractionsOption = None,
    seed: Annotated[int | None, typer.Option(help="Seed for splitting and partitioning.")] = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Print dataset sizes and the size and class balance of each worker's partition.

    Flags override the recipe's values. Without a recipe: digits, 4 workers, iid, seed 0.

    Examples:

      edgetrain data inspect recipes/quickstart.toml

      edgetrain data inspect --workers 8 --partition dirichlet --alpha 0.3

      edgetrain data inspect --dataset mnist --root ~/data/mnist --format json
    """
    import numpy as np

    from edgetrain.data import load_dataset, partition_stats

    overrides = data_flags(dataset, root, partition, alpha, fractions)
    recipe = build_recipe(recipe_path, overrides, workers, seed)
    cfg = recipe.data
    ds = load_dataset(cfg, recipe.run.seed)
    # the same call the workers make, so this shows exactly what each worker trains on; a
    # family with no data roles (the pipeline) feeds the whole split instead
    parts = run_partitions(recipe, ds.y_train)
    feed = None if parts is not None else whole_split_feed(recipe)
    if parts is None:
        parts = [np.arange(len(ds.y_train), dtype=np.int64)]
    report: dict[str, Any] = {
        "dataset": ds.name,
        "root": cfg.root,
        "input_shape": list(ds.input_shape),
        "classes": ds.classes,
        "train": len(ds.y_train),
        "test": len(ds.y_test),
        "partition": cfg.partition if feed is None else None,
        "alpha": cfg.alpha if feed is None and cfg.partition == "dirichlet" else None,
        "fractions": cfg.fractions if feed is None and cfg.partition == "fractions" else None,
        "feed": feed,
        "seed": recipe.run.seed,
        "workers": recipe.num_data_workers,
        **partition_stats(ds.y_train, parts, ds.classes),
    }
    emit(report, fmt, lambda: _render(report))
