"""``edgetrain data``: inspect datasets and how a recipe partitions them across workers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit

app = typer.Typer(help="Inspect datasets and their partitions.", no_args_is_help=True)


@app.command("inspect")
def inspect(
    recipe_path: Annotated[
        Path | None, typer.Argument(metavar="[RECIPE]", help="Take data, seed and workers from it.")
    ] = None,
    dataset: Annotated[
        str | None, typer.Option(help="digits, mnist, fashion-mnist, cifar10, synthetic.")
    ] = None,
    root: Annotated[
        str | None, typer.Option(help="Dataset directory (mnist, cifar10, ...).")
    ] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="Number of partitions.")] = None,
    partition: Annotated[str | None, typer.Option(help="iid, dirichlet or fractions.")] = None,
    alpha: Annotated[float | None, typer.Option(help="Dirichlet concentration.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for splitting and partitioning.")] = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Print dataset sizes and the size and class balance of each worker's partition.

    Examples:
      edgetrain data inspect recipes/quickstart.toml
      edgetrain data inspect --dataset mnist --root DIR --workers 4 \\
          --partition dirichlet --alpha 0.3
    """
    from edgetrain.data import partition_stats
    from edgetrain.recipe import load_recipe, parse_recipe
    from edgetrain.worker.setup import load_run_data, partitions

    base: dict[str, Any] = {"workers": [{"count": 4}]}
    if recipe_path is not None:
        base = load_recipe(recipe_path)[0].to_dict()
    data = dict(base.get("data", {}))
    for key, value in (
        ("dataset", dataset),
        ("root", root),
        ("partition", partition),
        ("alpha", alpha),
    ):
        if value is not None:
            data[key] = value
    if workers is not None:
        base["workers"] = [{"count": workers}]
    if seed is not None:
        base.setdefault("run", {})["seed"] = seed
    recipe = parse_recipe({**base, "data": data}, str(recipe_path or "command line"))
    ds = load_run_data(recipe)
    parts = partitions(recipe, ds)
    report = {
        "dataset": ds.name,
        "input_shape": list(ds.input_shape),
        "classes": ds.classes,
        "train": len(ds.y_train),
        "test": len(ds.y_test),
        "partition": recipe.data.partition,
        "alpha": recipe.data.alpha if recipe.data.partition == "dirichlet" else None,
        "seed": recipe.run.seed,
        **partition_stats(ds.y_train, parts, ds.classes),
    }

    def render() -> None:
        shape = "x".join(map(str, ds.input_shape))
        console.print(
            f"[bold]{ds.name}[/]: {report['train']} train / {report['test']} test samples, "
            f"input {shape}, {ds.classes} classes; partition {recipe.data.partition}"
            + (f" (alpha {recipe.data.alpha:g})" if report["alpha"] is not None else "")
        )
        table = Table(title="samples per class and partition")
        table.add_column("part", justify="right")
        table.add_column("size", justify="right")
        for c in range(ds.classes):
            table.add_column(str(c), justify="right")
        table.add_column("entropy", justify="right")
        table.add_column("TV dist", justify="right")
        for p in report["parts"]:
            table.add_row(
                str(p["part"]),
                str(p["size"]),
                *map(str, p["class_counts"]),
                f"{p['label_entropy_bits']:.2f}",
                f"{p['tv_distance']:.2f}",
            )
        console.print(table)

    emit(report, fmt, render)
