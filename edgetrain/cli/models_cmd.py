"""``edgetrain models``: list the zoo, show a model's layer specs, export to ONNX."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit
from edgetrain.errors import EdgetrainError

app = typer.Typer(help="List, inspect and export models.", no_args_is_help=True)

InputOption = Annotated[str, typer.Option("--input", help="Input shape CxHxW (or HxW).")]
ClassesOption = Annotated[int, typer.Option(min=2, help="Number of classes.")]


def parse_shape(text: str) -> tuple[int, int, int]:
    """'3x32x32' -> (3, 32, 32); '28x28' -> (1, 28, 28)."""
    try:
        dims = [int(p) for p in text.lower().split("x")]
    except ValueError:
        dims = []
    if len(dims) == 2:
        dims = [1, *dims]
    if len(dims) != 3 or min(dims) < 1:
        raise EdgetrainError(f"--input '{text}': expected CxHxW like 3x32x32")
    return dims[0], dims[1], dims[2]


@app.command("list")
def list_models(fmt: FormatOption = OutputFormat.text) -> None:
    """List the models edgetrain can build.

    Example: edgetrain models list --format json
    """
    from edgetrain.models import DESCRIPTIONS

    rows = [{"name": n, "description": d} for n, d in DESCRIPTIONS.items()]

    def render() -> None:
        table = Table(title="model zoo (random init; adapted to input channels, size, classes)")
        table.add_column("name", style="bold")
        table.add_column("description")
        for r in rows:
            table.add_row(r["name"], r["description"])
        console.print(table)

    emit({"models": rows}, fmt, render)


def _specs_for(target: str, shape: tuple[int, int, int], classes: int) -> list[Any]:
    from edgetrain.models import build_model, layer_specs, onnx_layer_specs

    path = Path(target)
    if target.endswith(".onnx") or path.is_file():
        if not path.is_file():
            raise EdgetrainError(f"ONNX file '{target}' not found", "check the path")
        return onnx_layer_specs(path)
    return layer_specs(build_model(target, shape, classes), shape)


@app.command("show")
def show(
    target: Annotated[str, typer.Argument(metavar="NAME|FILE.onnx", help="Zoo name or ONNX file.")],
    input_shape: InputOption = "3x32x32",
    classes: ClassesOption = 10,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Show a model's parametric layers in execution order, as the schedulers see them.

    Examples:
      edgetrain models show resnet18 --input 3x32x32
      edgetrain models show model.onnx --format json
    """
    from edgetrain.models import model_summary

    shape = parse_shape(input_shape)
    specs = _specs_for(target, shape, classes)
    totals = model_summary(specs)
    data = {
        "model": target,
        "input": list(shape),
        "layers": [s.to_dict() for s in specs],
        "total_params": totals["params"],
        "total_bytes": totals["bytes"],
    }

    def render() -> None:
        table = Table(
            title=f"{target}: {len(specs)} layers, {totals['params']:,} parameters, "
            f"{totals['bytes'] / 2**20:.2f} MiB"
        )
        for col in ("#", "name", "kind", "params", "bytes", "folded"):
            table.add_column(col, justify="right" if col in ("#", "params", "bytes") else "left")
        for i, s in enumerate(specs, 1):
            table.add_row(
                str(i),
                s.name,
                s.kind,
                f"{s.num_params:,}",
                f"{s.param_bytes:,}",
                ", ".join(s.folded),
            )
        console.print(table)

    emit(data, fmt, render)


@app.command("export")
def export(
    name: Annotated[str, typer.Argument(help="Zoo model name.")],
    onnx: Annotated[Path, typer.Option("--onnx", help="Output ONNX file.")],
    input_shape: InputOption = "3x32x32",
    classes: ClassesOption = 10,
) -> None:
    """Export a zoo model to ONNX; `models show FILE.onnx` reads the same layers back.

    Example: edgetrain models export lenet5 --input 1x28x28 --onnx lenet5.onnx
    """
    from edgetrain.models import build_model, export_onnx, layer_specs

    shape = parse_shape(input_shape)
    model = build_model(name, shape, classes)
    if onnx.parent and not onnx.parent.exists():
        raise EdgetrainError(f"directory '{onnx.parent}' does not exist", "create it first")
    export_onnx(model, shape, onnx)
    console.print(f"wrote {onnx} ({len(layer_specs(model, shape))} layers)")
