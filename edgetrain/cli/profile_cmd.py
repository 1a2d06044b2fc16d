"""``edgetrain profile``: measure this device (per layer) and its links; ``profile serve``."""

from __future__ import annotations

import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit, err_console
from edgetrain.errors import EdgetrainError

app = typer.Typer(
    help="Measure this device layer by layer, its links, and its slowdown under contention.",
    invoke_without_command=True,
)


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """'8,16,32' -> (8, 16, 32)."""
    try:
        sizes = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1 or len(set(sizes)) != len(sizes):
        raise EdgetrainError(
            f"--batch-sizes '{text}': expected distinct positive ints like 8,16,32"
        )
    return sizes


def parse_levels(text: str) -> tuple[float, ...]:
    """'0,0.5,1' -> (0.0, 0.5, 1.0), each in [0, 1]."""
    try:
        levels = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        levels = ()
    if len(levels) < 3 or not all(0 <= v <= 1 for v in levels):
        raise EdgetrainError(
            f"--levels '{text}': expected at least 3 intensities in [0, 1] like 0,0.25,0.5,0.75,1"
        )
    return levels


def parse_model_options(items: list[str] | None) -> dict[str, Any]:
    """['hidden=[2048, 2048]', 'width=2'] -> {'hidden': [2048, 2048], 'width': 2}: each value
    read as a TOML value (as a recipe's ``[model]`` table writes it), else as a string."""
    import tomllib

    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise EdgetrainError(
                f"--model-option '{item}': expected KEY=VALUE",
                "for example --model-option 'hidden=[2048, 2048]'",
            )
        try:
            out[key] = tomllib.loads(f"v = {text.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = text.strip()
    return out


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Any]:
    """A rich progress bar on stderr; yields the callback the library calls."""
    if not enabled:
        yield None
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
    task = bar.add_task("profiling", total=None)

    def update(what: str, done: int, total: int) -> None:
        bar.update(task, description=what, completed=done, total=total or None)

    with bar:
        yield update


@app.callback()
def profile(
    ctx: typer.Context,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="Zoo model name or ONNX file to profile."),
    ] = None,
    input_shape: Annotated[
        str | None,
        typer.Option(
            "--input", "-i", help="Input shape CxHxW (or HxW); default 3x32x32, or --data's."
        ),
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            "--data",
            help="Time the steps on this dataset's samples (digits, mnist, fashion-mnist, cifar10;"
            " a step's time depends on its inputs), as the recipe's [data] names it.",
        ),
    ] = None,
    data_root: Annotated[
        str | None, typer.Option("--data-root", help="The dataset's directory (as [data] root).")
    ] = None,
    classes: Annotated[int, typer.Option("--classes", "-c", min=2, help="Classes.")] = 10,
    model_option: Annotated[
        list[str] | None,
        typer.Option(
            "--model-option",
            help="A zoo model's option as KEY=VALUE, as the recipe's [model] table has it "
            "(repeatable), e.g. 'hidden=[2048, 2048]'.",
        ),
    ] = None,
    batch_sizes: Annotated[
        str, typer.Option("--batch-sizes", "-b", help="Comma-separated batch sizes.")
    ] = "32",
    run_dir: Annotated[
        Path | None, typer.Option("--run-dir", help="Write RUN/profiles/<host>.json here.")
    ] = None,
    host_name: Annotated[
        str | None, typer.Option("--host-name", help="Profile name (default: hostname).")
    ] = None,
    peer: Annotated[
        list[str] | None,
        typer.Option("--peer", help="Probe the link to 'edgetrain profile serve' at tcp://H:P."),
    ] = None,
    probe_timeout: Annotated[
        float, typer.Option("--probe-timeout", min=0.1, help="Seconds to wait for a peer.")
    ] = 5.0,
    probe_max_mib: Annotated[
        int, typer.Option("--probe-max-mib", min=1, help="Largest probe transfer (MiB).")
    ] = 16,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed runs.")] = 10,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Untimed runs first.")] = 3,
    min_time: Annotated[
        float,
        typer.Option("--min-time", min=0.0, help="Seconds of timed runs at least (more repeats)."),
    ] = 1.0,
    threads: Annotated[
        int | None, typer.Option("--threads", min=1, help="torch threads (default: torch's).")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
    torch_model: Annotated[
        str | None,
        typer.Option("--torch-model", help="Zoo model matching an ONNX file, measured for it."),
    ] = None,
    contention: Annotated[
        bool,
        typer.Option("--contention", help="Also profile under generated CPU+disk load."),
    ] = False,
    levels: Annotated[
        str, typer.Option("--levels", help="Load intensities for --contention.")
    ] = "0,0.25,0.5,0.75,1",
    kernels: Annotated[
        list[str] | None,
        typer.Option(
            "--kernels",
            help="Also time a family's own kernels at the first batch size (repeatable; "
            "'pipeline': a Local stage): its cost model scales the layers to them.",
        ),
    ] = None,
    history: Annotated[
        Path | None,
        typer.Option(
            "--history",
            help="Contention history JSONL (default: RUN/profiles/<host>.history.jsonl).",
        ),
    ] = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Profile a model on this device and/or the links to peers.

    Examples:
      edgetrain profile --model resnet18 --input 3x32x32 --batch-sizes 8,16,32 --run-dir RUN
      edgetrain profile --model mlp --model-option 'hidden=[2048, 2048]' --input 1x28x28
      edgetrain profile --model model.onnx --run-dir RUN
      edgetrain profile --peer tcp://10.0.0.2:5555 --run-dir RUN
      edgetrain profile --model lenet5 --input 1x28x28 --contention --run-dir RUN
      edgetrain profile --model lenet5 --data mnist --data-root ~/data/mnist --run-dir RUN
      edgetrain profile --model mlp --input 1x8x8 --batch-sizes 16 --kernels pipeline
      edgetrain profile serve --bind 0.0.0.0 --port 5555
    """
    if ctx.invoked_subcommand is not None:
        return
    from edgetrain.cli.models_cmd import parse_shape
    from edgetrain.profile.probe import ProbeConfig
    from edgetrain.profile.run import ProfileRequest, make_profile, save_profile
    from edgetrain.rundir import check_writable

    host = host_name or socket.gethostname()
    level_values = parse_levels(levels) if contention else ()
    if run_dir is not None:  # before measuring: a measurement it cannot save is time lost
        check_writable(run_dir, "--run-dir", "pass a writable --run-dir")
    if history is not None and contention:
        check_writable(history.expanduser().parent, "--history", "name a file you can write")
    if contention and (model is None or (model.lower().endswith(".onnx") and not torch_model)):
        raise EdgetrainError(
            "--contention needs a model to run", "give a zoo model, or --torch-model for ONNX"
        )
    for family in kernels or ():
        if family not in KERNEL_TIMERS:
            raise EdgetrainError(
                f"--kernels {family!r}: no timer for that family", f"use {', '.join(KERNEL_TIMERS)}"
            )
    if kernels and (model is None or model.lower().endswith(".onnx")):
        raise EdgetrainError("--kernels times a zoo model", "give --model NAME")
    if kernels and device != "cpu":
        raise EdgetrainError("--kernels times on the CPU", "drop --device or --kernels")
    inputs, shape = None, parse_shape(input_shape or "3x32x32")
    if dataset is not None:
        inputs, data_shape, data_classes = _data_inputs(dataset, data_root)
        shape = parse_shape(input_shape) if input_shape else data_shape
        classes = data_classes
    req = ProfileRequest(
        host=host,
        model=model,
        input_shape=shape,
        classes=classes,
        batch_sizes=parse_batch_sizes(batch_sizes),
        repeats=repeats,
        warmup=warmup,
        min_time_s=min_time,
        device=device,
        threads=threads,
        peers=tuple(peer or ()),
        probe=ProbeConfig(connect_timeout_s=probe_timeout).up_to(probe_max_mib * 2**20),
        torch_model=torch_model,
        run_dir=run_dir,
        model_options=parse_model_options(model_option),
        inputs=inputs,
        data=dataset,
    )
    with progress_bar(err_console.is_terminal) as progress:
        data = make_profile(req, progress)
        if contention:
            from edgetrain.profile.contention import run_contention

            hist = history or (run_dir / "profiles" / f"{host}.history.jsonl" if run_dir else None)
            data["contention"] = run_contention(req, level_values, hist, progress)
        if kernels:
            data["kernels"] = {f: _kernels(f, req, data, progress) for f in dict.fromkeys(kernels)}
    try:
        path = save_profile(run_dir, data) if run_dir is not None else None
    except OSError as exc:  # checked above; this is the disk filling up or a race
        raise EdgetrainError(
            f"--run-dir '{run_dir}': cannot write the profile: {exc.strerror or exc}",
            "pass a writable --run-dir",
        ) from None
    emit(data, fmt, lambda: _render(data, path))


def _data_inputs(name: str, root: str | None) -> tuple[Any, tuple[int, int, int], int]:
    """``--data``'s first samples, their shape and classes, or one line naming the problem."""
    from pydantic import ValidationError

    from edgetrain.profile.run import data_samples
    from edgetrain.recipe import DataSection

    try:
        cfg = DataSection.model_validate({"dataset": name, "root": root})
    except ValidationError as exc:
        problem = exc.errors()[0].get("msg", str(exc)).removeprefix("Value error, ")
        raise EdgetrainError(
            f"--data {name}: {problem}",
            "name digits, mnist, fashion-mnist or cifar10, with --data-root DIR for the last three",
        ) from None
    return data_samples(cfg)


def _render(data: dict[str, Any], path: Path | None) -> None:
    if data["layers"]:
        table = Table(title=f"{data['model']} on {data['host']} ({data['compute_source']})")
        for col in ("#", "layer", "params B", "activ. B", "fwd ms", "bwd ms", "IQR ms"):
            table.add_column(col, justify="left" if col == "layer" else "right")
        for i, lay in enumerate(data["layers"], 1):
            iqr = lay.get("fwd_iqr_s", 0.0) + lay.get("bwd_iqr_s", 0.0)
            table.add_row(
                str(i),
                lay["name"],
                f"{lay['param_bytes']:,}",
                f"{lay['activation_bytes']:,}",
                f"{lay['fwd_s'] * 1e3:.3f}",
                f"{lay['bwd_s'] * 1e3:.3f}",
                f"{iqr * 1e3:.3f}",
            )
        console.print(table)
        _render_summary(data)
    if data["links"]:
        links = Table(title="links")
        for col in ("peer", "bandwidth MB/s", "Mbit/s", "rtt ms", "dt ms"):
            links.add_column(col, justify="left" if col == "peer" else "right")
        for link in data["links"]:
            links.add_row(
                link["peer"],
                f"{link['bandwidth_Bps'] / 1e6:.2f}",
                f"{link['bandwidth_Bps'] * 8 / 1e6:.1f}",
                f"{link['rtt_s'] * 1e3:.3f}",
                f"{link['dt_s'] * 1e3:.3f}",
            )
        console.print(links)
    if "contention" in data:
        c = data["contention"]
        console.print(
            f"predictor: {c['samples']} samples, MAPE on held-out levels "
            f"{c['mape_held_out'] * 100:.2f}%",
            highlight=False,
        )
    if path is not None:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)


#: the families whose own kernels ``--kernels`` can time
KERNEL_TIMERS = ("pipeline",)


def _kernels(family: str, req: Any, data: dict[str, Any], progress: Any) -> dict[str, Any]:
    """The profile's ``kernels.<family>`` (:mod:`edgetrain.pipeline.kernel_time`), timed as the
    profile ``data`` was, under the CPU quota it found."""
    from edgetrain.pipeline.kernel_time import time_local
    from edgetrain.profile.run import compute_config

    assert family == "pipeline"
    if progress is not None:
        progress(f"{family} kernels", 0, 0)
    q = data.get("cpu_quota")
    cfg = compute_config(req, (q["cores"], q["period_s"]) if q else None)
    return time_local(req.model, req.input_shape, req.classes, cfg, req.model_options)


def _render_summary(data: dict[str, Any]) -> None:
    tp = ", ".join(f"{bs}: {v:,.1f}" for bs, v in data["throughput"].items())
    lines = [
        f"step_s {data['step_s'] * 1e3:.3f} ms at batch {data['batch_sizes'][0]}",
        f"throughput (samples/s) {tp}",
        f"peak memory {data['peak_memory_bytes'] / 2**20:,.1f} MiB",
    ]
    if data.get("layer_sum_ratio") is not None:
        lines.insert(
            1,
            f"sum of layer fwd+bwd {data['layer_sum_s'] * 1e3:.3f} ms "
            f"= {data['layer_sum_ratio']:.3f} x step_s",
        )
    quota = data.get("cpu_quota")
    if quota:
        lines.append(
            f"CPU quota {quota['cores']:g} cores every {quota['period_s'] * 1e3:g} ms: "
            f"sustained step {data['sustained_step_s'] * 1e3:.3f} ms "
            f"({data['throttle_factor']:.2f} x step_s, the burst pace)"
        )
    for family, kern in (data.get("kernels") or {}).items():
        lines.append(f"{family} kernels: {kern['step_s'] * 1e3:.3f} ms per step of {kern['batch']}")
    for line in lines:
        console.print(line, highlight=False)


@app.command("serve")
def serve(
    bind: Annotated[str, typer.Option("--bind", help="Address to listen on.")] = "0.0.0.0",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port (0: any free port).")
    ] = 0,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Answer link probes from 'edgetrain profile --peer' until interrupted.

    The first line printed is the endpoint to give to --peer.

    Examples:
      edgetrain profile serve --bind 0.0.0.0 --port 5555
      edgetrain profile serve --bind 127.0.0.1 --format json
    """
    from edgetrain.profile.probe import ProbeServer

    stop = threading.Event()
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with ProbeServer(bind, port) as server:
            emit(
                {"endpoint": server.endpoint},
                fmt,
                lambda: console.print(f"serving link probes at {server.endpoint}", highlight=False),
            )
            sys.stdout.flush()
            server.serve(stop)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
