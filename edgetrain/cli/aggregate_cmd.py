"""``edgetrain aggregate``: build EdgeGossip's aggregated data points for each partition."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit, err_console
from edgetrain.cli.data_options import (
    DatasetOption,
    FractionsOption,
    PartitionOption,
    RootOption,
    build_recipe,
    data_flags,
    run_partitions,
)
from edgetrain.errors import EdgetrainError

if TYPE_CHECKING:
    from edgetrain.aggregate import AggregateConfig
    from edgetrain.recipe import Recipe


class Reducer(str, Enum):
    svd = "svd"
    svd_sample = "svd-sample"
    isvd = "isvd"
    hash = "hash"
    pca = "pca"
    histogram = "histogram"


class Divider(str, Enum):
    kmeans = "kmeans"
    lsh = "lsh"
    gmm = "gmm"


def resolve_recipe(
    recipe_path: Path | None, data: dict[str, Any], workers: int | None, seed: int | None
) -> tuple[Recipe, bool]:
    """The recipe (or flags) resolved as ``data inspect`` does, and whether it is partitioned.

    Partitioned when a recipe is given or ``--workers`` is; otherwise the whole training split
    is one partition named ``all``.
    """
    partitioned = recipe_path is not None or workers is not None
    split_flags = [k for k in ("partition", "alpha", "fractions") if data.get(k) is not None]
    if split_flags and not partitioned:
        raise EdgetrainError(
            f"--{split_flags[0]} splits the data across workers, but there are none",
            "add --workers N (or give a recipe)",
        )
    recipe = build_recipe(recipe_path, data, workers if partitioned else 1, seed)
    return recipe, partitioned


def aggregate_config(recipe: Recipe, flags: dict[str, Any]) -> AggregateConfig:
    """The recipe's ``[aggregate]`` section with flags applied; seed defaults to ``[run] seed``."""
    from edgetrain.aggregate import AggregateConfig

    sec = recipe.aggregate.model_dump()
    sec.update({k: v for k, v in flags.items() if v is not None})
    if sec.get("seed") is None:
        sec["seed"] = recipe.run.seed
    return AggregateConfig(**sec)


def _run_dir(run_dir: Path | None, recipe: Recipe) -> Path:
    """``--run-dir`` itself, or a fresh run directory under the recipe's ``[run] runs_root``."""
    from edgetrain.rundir import RunDir

    if run_dir is not None:
        if run_dir.exists() and not run_dir.is_dir():
            raise EdgetrainError(f"--run-dir '{run_dir}' is not a directory", "pass a directory")
        return run_dir
    return RunDir.create(recipe.run.runs_root, recipe.run.name).path


def _render(report: dict[str, Any]) -> None:
    from rich import box
    from rich.table import Table

    from edgetrain.aggregate.aggregates import STEPS

    console.print(
        f"[bold]{report['dataset']}[/]: {report['method']}, ratio {report['ratio']}, "
        f"seed {report['seed']} -> {report['run_dir']}/data/",
        soft_wrap=True,
    )
    sizes = Table(title="subset sizes per partition", box=box.SIMPLE_HEAD)
    times = Table(title="time per step (seconds)", box=box.SIMPLE_HEAD)
    for name in ("part", "samples", "points", "d'", "min", "median", "mean", "max"):
        sizes.add_column(name, justify="right")
    for name in ("part", *STEPS, "total"):
        times.add_column(name, justify="right")
    for p in report["partitions"]:
        s, t = p["sizes"], p["timings"]
        sizes.add_row(
            p["partition"], str(p["samples"]), str(p["points"]), str(p["dims"]),
            str(s["min"]), f"{s['median']:g}", f"{s['mean']:.2f}", str(s["max"]),
        )  # fmt: skip
        times.add_row(p["partition"], *(f"{t[k]:.3f}" for k in STEPS), f"{p['total_s']:.3f}")
    console.print(sizes)
    console.print(times)
    hist = Table(title="subset sizes (all partitions)", box=box.SIMPLE_HEAD)
    hist.add_column("size", justify="right")
    hist.add_column("subsets", justify="right")
    hist.add_column("")
    top = max((b["count"] for b in report["sizes"]["histogram"]), default=1) or 1
    for b in report["sizes"]["histogram"]:
        span = str(b["from"]) if b["from"] == b["to"] else f"{b['from']}-{b['to']}"
        hist.add_row(span, str(b["count"]), "█" * round(30 * b["count"] / top))
    console.print(hist)


def aggregate(
    recipe_path: Annotated[
        Path | None,
        typer.Argument(metavar="RECIPE", help="Recipe giving data, workers and \\[aggregate]."),
    ] = None,
    dataset: DatasetOption = None,
    root: RootOption = None,
    reduce: Annotated[
        Reducer | None, typer.Option(help="Dimensionality reduction (default: svd).")
    ] = None,
    divide: Annotated[
        Divider | None, typer.Option(help="Division within each class (default: kmeans).")
    ] = None,
    ratio: Annotated[
        int | None, typer.Option(min=1, help="Samples per aggregated point (default: 10).")
    ] = None,
    dims: Annotated[
        int | None, typer.Option(min=1, help="Reduced dimensions d' (default: by method).")
    ] = None,
    run_dir: Annotated[
        Path | None, typer.Option("--run-dir", help="Run directory; files go to RUN/data/.")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="Partition across N workers, one file each.")
    ] = None,
    partition: PartitionOption = None,
    alpha: Annotated[float | None, typer.Option(help="Dirichlet concentration.")] = None,
    fractions: FractionsOption = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed for data, partition and aggregation.")
    ] = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Build EdgeGossip's aggregated data points: reduce, divide within classes, average.

    One file per worker partition (from a recipe or --workers): RUN/data/aggregates-<i>.npz.
    Without either, the whole training split: RUN/data/aggregates-all.npz.
    Flags override the recipe's \\[aggregate] and \\[data] sections.
    Without --run-dir, a recipe's run gets a fresh directory under its \\[run] runs_root.

    Examples:

      edgetrain aggregate --dataset mnist --root DIR --reduce svd --divide kmeans --run-dir RUN

      edgetrain aggregate recipes/quickstart.toml --reduce isvd --divide lsh --format json
    """
    from edgetrain.aggregate.stage import aggregate_stage, partitions_of
    from edgetrain.data import load_dataset

    data = data_flags(dataset, root, partition, alpha, fractions)
    recipe, partitioned = resolve_recipe(recipe_path, data, workers, seed)
    flags = {
        "reduce": reduce.value if reduce is not None else None,
        "divide": divide.value if divide is not None else None,
        "ratio": ratio,
        "dims": dims,
        "seed": seed,
    }
    cfg = aggregate_config(recipe, flags)
    if run_dir is None and recipe_path is None:
        raise EdgetrainError("no run directory given", "pass --run-dir RUN")
    ds = load_dataset(recipe.data, recipe.run.seed)
    # the same call the workers make; the whole split when the family shards nothing (pipeline)
    parts = run_partitions(recipe, ds.y_train) if partitioned else None
    partitions = partitions_of(parts, len(ds.y_train))
    out_dir = _run_dir(run_dir, recipe)
    report = _with_progress(
        lambda cb: aggregate_stage(ds, partitions, cfg, out_dir, cb), len(partitions)
    )
    emit(report, fmt, lambda: _render(report))


def _with_progress(work: Any, partitions: int) -> dict[str, Any]:
    """Run ``work(callback)`` under a progress bar on stderr (partitions x steps)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from edgetrain.aggregate.aggregates import STEPS

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task("aggregating", total=partitions * len(STEPS))
        started: list[bool] = []

        def step(part: str, name: str) -> None:
            if started:
                bar.advance(task)
            started.append(True)
            bar.update(task, description=f"partition {part}: {name}")

        report: dict[str, Any] = work(step)
        bar.update(task, completed=partitions * len(STEPS))
    return report


class EvalDataset(str, Enum):
    digits = "digits"
    mnist = "mnist"


def _render_eval(report: dict[str, Any]) -> None:
    from rich import box
    from rich.table import Table

    from edgetrain.aggregate.aggregates import STEPS

    table = Table(
        title=(
            f"{report['dataset']}: {report['train_samples']} train / {report['test_samples']} "
            f"test, ratio {report['ratio']}, {report['model']}, {report['epochs']} epochs"
        ),
        box=box.SIMPLE_HEAD,
    )
    table.add_column("method", no_wrap=True)
    table.add_column("points", justify="right")
    for step in STEPS:
        table.add_column(step, justify="right")
    table.add_column("total", justify="right")
    table.add_column("accuracy", justify="right")
    for r in report["rows"]:
        t = r["timings"]
        cells = [f"{t[s]:.3f}" for s in STEPS] + [f"{r['generation_s']:.3f}"] if t else ["-"] * 4
        name = f"[bold]{r['method']}[/]" if r["selected"] else r["method"]
        table.add_row(name, str(r["points"]), *cells, f"{r['accuracy']:.4f}")
    console.print(table)
    console.print(
        "times in seconds per generation step; bold: the paper's three selected combinations",
        style="dim",
        soft_wrap=True,
    )
    console.print(f"figure: {report['figure']}", soft_wrap=True)


def aggregate_eval(
    dataset: Annotated[EvalDataset, typer.Option(help="digits, or MNIST from --root.")] = (
        EvalDataset.digits
    ),
    root: Annotated[str | None, typer.Option(help="MNIST directory (IDX files).")] = None,
    ratio: Annotated[int, typer.Option(min=1, help="Samples per aggregated point.")] = 10,
    model: Annotated[
        str | None, typer.Option(help="Model from the zoo (default: lenet5 for mnist, mlp).")
    ] = None,
    epochs: Annotated[int, typer.Option(min=1, help="Training epochs per model.")] = 20,
    batch_size: Annotated[int, typer.Option(min=1, help="Minibatch size.")] = 32,
    lr: Annotated[float, typer.Option(min=0.0, help="SGD learning rate (momentum 0.9).")] = 0.01,
    seed: Annotated[int, typer.Option(help="Seed for data, aggregation and training.")] = 0,
    out: Annotated[
        Path, typer.Option(help="Directory for aggregate-eval-<dataset>.{json,png}.")
    ] = Path("aggregate-eval"),
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Compare the eight reduce+divide combinations (EdgeGossip Fig. 3).

    For each: the time of each generation step, and the test accuracy of a model trained only
    on the aggregated points.
    A last row trains on all the training data, for reference.
    Writes OUT/aggregate-eval-<dataset>.json and .png.

    Examples:

      edgetrain aggregate-eval --dataset digits

      edgetrain aggregate-eval --dataset mnist --root ../shared/data/mnist-test --epochs 10
    """
    import json

    from edgetrain.aggregate.evaluate import TrainSettings, compare, plot_comparison
    from edgetrain.data import load_dataset
    from edgetrain.models.zoo import check_model_config
    from edgetrain.recipe import DataSection
    from edgetrain.rundir import atomic_write_text, check_writable

    if not 0 < lr < float("inf"):  # what [train] lr allows: the trainer's TrainSection checks it
        raise EdgetrainError(f"--lr {lr:g} must be a positive, finite number", "e.g. --lr 0.01")
    check_writable(out, "--out", "pass a writable --out directory")  # before the training
    name = model or ("lenet5" if dataset == EvalDataset.mnist else "mlp")
    check_model_config(name)
    if dataset == EvalDataset.mnist and not root:
        raise EdgetrainError("dataset 'mnist' needs its directory", "pass --root DIR")
    ds = load_dataset(DataSection(dataset=dataset.value, root=root), seed)
    settings = TrainSettings(name, epochs, batch_size, lr, 0.9, seed)
    report = _with_steps(lambda cb: compare(ds, settings, ratio, progress=cb))
    stem = out / f"aggregate-eval-{ds.name}"
    report["figure"] = str(plot_comparison(report, stem.with_suffix(".png")))
    atomic_write_text(stem.with_suffix(".json"), json.dumps(report, indent=2) + "\n")
    emit(report, fmt, lambda: _render_eval(report))


def _with_steps(work: Any) -> dict[str, Any]:
    """Run ``work(callback)`` with a spinner on stderr naming the method being evaluated."""
    with err_console.status("evaluating") as status:
        report: dict[str, Any] = work(lambda m: status.update(f"evaluating {m}"))
    return report
