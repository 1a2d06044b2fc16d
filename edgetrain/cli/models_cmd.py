"""``edgetrain models``: list the zoo, show a model's layer specs, export to ONNX."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit
from edgetrain.errors import EdgetrainError

if TYPE_CHECKING:
    from edgetrain.models import LayerSpec

app = typer.Typer(
    help="List the model zoo, show layer specs, export to ONNX.", no_args_is_help=True
)

DEFAULT_INPUT = "3x32x32"
DEFAULT_CLASSES = 10

InputOption = Annotated[
    str, typer.Option("--input", "-i", help="Input shape CxHxW (or HxW for one channel).")
]
ClassesOption = Annotated[int, typer.Option("--classes", "-c", min=2, help="Number of classes.")]


@app.callback()
def _models() -> None:
    """List the model zoo, show layer specs, export to ONNX."""


def parse_shape(text: str) -> tuple[int, int, int]:
    """'3x32x32' -> (3, 32, 32); '28x28' -> (1, 28, 28)."""
    try:
        dims = [int(p) for p in text.strip().lower().split("x")]
    except ValueError:
        dims = []
    if len(dims) == 2:
        dims = [1, *dims]
    if len(dims) != 3 or min(dims) < 1:
        raise EdgetrainError(f"--input '{text}': expected CxHxW like 3x32x32")
    return dims[0], dims[1], dims[2]


@app.command("list")
def list_models(fmt: FormatOption = OutputFormat.text) -> None:
    """List the models edgetrain can build, with parameter counts at 3x32x32, 10 classes.

    Models marked "torchvision" need it installed (the `vision` extra); the others need torch
    alone.

    Examples:
      edgetrain models list
      edgetrain models list --format json
    """
    # a static table (checked against real builds by the tests): no model is built, no torch
    from edgetrain.models.catalog import (
        DESCRIPTIONS,
        LISTED_CLASSES,
        LISTED_INPUT,
        LISTED_PARAMS,
        MIN_SIDE,
        TORCHVISION_MODELS,
        VISION_FIX,
        torchvision_installed,
    )

    shape = LISTED_INPUT
    vision = torchvision_installed()
    rows: list[dict[str, Any]] = [
        {
            "name": name,
            "description": text,
            "params": LISTED_PARAMS[name],
            "min_side": MIN_SIDE.get(name),
            "needs_torchvision": name in TORCHVISION_MODELS,
            "available": vision or name not in TORCHVISION_MODELS,
        }
        for name, text in DESCRIPTIONS.items()
    ]

    def render() -> None:
        table = Table(title="model zoo (random init; adapted to input channels, size, classes)")
        table.add_column("name", style="bold")
        table.add_column("description")
        table.add_column(f"params @ {'x'.join(map(str, shape))}", justify="right")
        table.add_column("resized up to", justify="right")
        table.add_column("needs")
        for r in rows:
            side = r["min_side"]
            needs = "" if not r["needs_torchvision"] else "torchvision"
            table.add_row(
                r["name"],
                r["description"],
                f"{r['params']:,}",
                f"{side}" if side else "",
                needs if r["available"] else f"[red]{needs} (not installed)[/]",
            )
        console.print(table)
        if not vision:
            console.print(
                f"torchvision is not installed, so its models cannot be built: {VISION_FIX}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )

    emit(
        {
            "input": list(shape),
            "classes": LISTED_CLASSES,
            "torchvision_installed": vision,
            "models": rows,
        },
        fmt,
        render,
    )


def _is_onnx(target: str) -> bool:
    return target.lower().endswith(".onnx") or Path(target).is_file()


def _onnx_input(path: Path) -> list[int] | None:
    """The [C, H, W] of the graph's first input, when it is a static 4-D shape."""
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
        dims = graph.input[0].type.tensor_type.shape.dim
    except Exception:  # noqa: BLE001 - only a nicety; the specs reader reports bad files
        return None
    values = [d.dim_value if d.HasField("dim_value") else 0 for d in dims]
    return values[1:] if len(values) == 4 and all(values[1:]) else None


def _specs_for(
    target: str, shape: tuple[int, int, int], classes: int
) -> tuple[list[LayerSpec], list[int] | None]:
    from edgetrain.models import build_model, layer_specs, onnx_layer_specs

    if _is_onnx(target):
        path = Path(target)
        specs = onnx_layer_specs(path)  # raises ModelError for a missing or bad file
        return specs, _onnx_input(path)
    return layer_specs(build_model(target, shape, classes), shape), list(shape)


def _layers_table(title: str, specs: list[LayerSpec]) -> Table:
    table = Table(title=title)
    for col in ("#", "name", "kind", "params", "bytes", "folded"):
        table.add_column(col, justify="right" if col in ("#", "params", "bytes") else "left")
    for i, s in enumerate(specs, 1):
        table.add_row(
            str(i), s.name, s.kind, f"{s.num_params:,}", f"{s.param_bytes:,}", ", ".join(s.folded)
        )
    return table


@app.command("show")
def show(
    target: Annotated[
        str, typer.Argument(metavar="NAME_OR_ONNX_FILE", help="Zoo model name or ONNX file.")
    ],
    input_shape: InputOption = DEFAULT_INPUT,
    classes: ClassesOption = DEFAULT_CLASSES,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Show a model's parametric layers in execution order, as the schedulers see them.

    Parameter-free modules (activations, pooling, resizing) are folded into the next layer.
    An argument ending in .onnx (or naming an existing file) is read as an ONNX graph; then
    --input and --classes are ignored.

    Examples:
      edgetrain models show resnet18 --input 3x32x32
      edgetrain models show lenet5 --input 28x28 --classes 10
      edgetrain models show model.onnx --format json
    """
    from edgetrain.models import model_summary

    shape = parse_shape(input_shape)
    specs, shown_input = _specs_for(target, shape, classes)
    totals = model_summary(specs)
    data: dict[str, Any] = {
        "model": target,
        "input": shown_input,
        "layers": [s.to_dict() for s in specs],
        "total_params": totals["params"],
        "total_bytes": totals["bytes"],
    }

    def render() -> None:
        title = (
            f"{target}: {len(specs)} layers, {totals['params']:,} parameters, "
            f"{totals['bytes'] / 2**20:.2f} MiB"
        )
        console.print(_layers_table(title, specs))

    emit(data, fmt, render)


@app.command("export")
def export(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Zoo model name.")],
    onnx: Annotated[Path, typer.Option("--onnx", "-o", help="ONNX file to write.")],
    input_shape: InputOption = DEFAULT_INPUT,
    classes: ClassesOption = DEFAULT_CLASSES,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Export a zoo model (random weights) to ONNX, written atomically.

    `edgetrain models show FILE.onnx` then reads the same layers back.

    Examples:
      edgetrain models export lenet5 --input 1x28x28 --onnx lenet5.onnx
      edgetrain models export resnet18 --onnx resnet18.onnx --classes 100
    """
    from edgetrain.models import build_model, export_onnx, model_summary, onnx_layer_specs

    shape = parse_shape(input_shape)
    model = build_model(name, shape, classes)
    parent = onnx.parent
    if not parent.is_dir():
        raise EdgetrainError(f"--onnx: directory '{parent}' does not exist", "create it first")
    export_onnx(model, shape, onnx)
    totals = model_summary(onnx_layer_specs(onnx))
    data = {
        "model": name,
        "input": list(shape),
        "classes": classes,
        "path": str(onnx),
        "layers": totals["layers"],
        "total_params": totals["params"],
        "total_bytes": totals["bytes"],
    }

    def render() -> None:
        console.print(
            f"wrote {onnx} ({totals['layers']} layers, {totals['params']:,} parameters)",
            highlight=False,
            soft_wrap=True,
        )

    emit(data, fmt, render)
