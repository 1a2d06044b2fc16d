"""``edgetrain plan``: DynaComm schedules and every strategy's predicted iteration time."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit, err_console
from edgetrain.cli.plan_files import free_stem, renamed_note, unit_error
from edgetrain.errors import EdgetrainError

if TYPE_CHECKING:
    from edgetrain.plan.strategies import StrategyResult


def _name_ok(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise EdgetrainError(f"plan name {name!r} must be letters, digits, '.', '_' or '-'")
    return name


def plan(
    profile: Annotated[
        Path | None,
        typer.Option(help="Profile JSON (RUN/profiles/HOST.json) from 'edgetrain profile'."),
    ] = None,
    costs: Annotated[
        Path | None,
        typer.Option(help='Cost file: {"dt": s, "layers": [{"name","pt","fc","bc","gt"}]}.'),
    ] = None,
    bandwidth: Annotated[
        str | None,
        typer.Option(
            help="Link rate with its unit: 100mbit, 1gbit, 100Mbps (bits/s) or 12.5MBps, "
            "12.5MB/s (bytes/s); a number without a unit, or 10mb, is refused. A comma "
            "list is a what-if."
        ),
    ] = None,
    rtt: Annotated[
        str | None, typer.Option(help="Round-trip time, e.g. 10ms (dt when nothing better).")
    ] = None,
    dt: Annotated[
        str, typer.Option(help="Per-transmission overhead: auto, or seconds (0.004, 4ms).")
    ] = "auto",
    run_dir: Annotated[
        Path | None,
        typer.Option(
            "--run-dir",
            help="Write RUN/plans/NAME.json (default: the profile's RUN); an existing one is "
            "kept and the new plan goes to NAME-2.json.",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Plan name (default: the input's stem).")] = None,
    plot: Annotated[bool, typer.Option("--plot", help="Also write a Gantt chart PNG.")] = False,
    pipeline: Annotated[
        bool, typer.Option("--pipeline", help="Cut the model into pipeline stages instead.")
    ] = False,
    stages: Annotated[int | None, typer.Option(help="--pipeline: number of stages.")] = None,
    recipe: Annotated[
        Path | None, typer.Option(help="--pipeline: the recipe (model, technique, window).")
    ] = None,
    objective: Annotated[
        str, typer.Option(help="--pipeline: time, params or memory (min-max over stages).")
    ] = "time",
    technique: Annotated[
        str | None, typer.Option(help="--pipeline: pipedream, greedy or mcpipe (memory model).")
    ] = None,
    microbatch: Annotated[
        int | None, typer.Option(help="--pipeline: samples per microbatch.")
    ] = None,
    window_extra: Annotated[
        int | None, typer.Option(help="--pipeline: extra window depth e (m_s = N - s + e).")
    ] = None,
    memory_cap: Annotated[
        str | None, typer.Option(help="--pipeline: host memory per stage, e.g. 2g or 1g,2g.")
    ] = None,
    speeds: Annotated[
        str | None, typer.Option(help="--pipeline: slowdown per stage's host, e.g. 1,1,1.5.")
    ] = None,
    testbed: Annotated[
        Path | None,
        typer.Option(help="--pipeline: caps, speeds and links from a testbed spec's worker slots."),
    ] = None,
    hosts: Annotated[
        Path | None,
        typer.Option(help="--pipeline: memory caps from a hosts file's `memory`, in slot order."),
    ] = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Plan parameter pulls and gradient pushes: sequential, layer-by-layer, iBatch, DynaComm.

    Examples:
    edgetrain plan --profile runs/r1/profiles/jetson.json --bandwidth 100mbit --rtt 10ms
    edgetrain plan --profile runs/r1/profiles/jetson.json --bandwidth 10mbit,100mbit,1gbit
    edgetrain plan --costs costs.json --format json
    edgetrain plan --pipeline --recipe r.toml --profile RUN/profiles/h.json --stages 3
    edgetrain plan --pipeline --recipe r.toml --hosts hosts.toml --objective memory
    """
    if pipeline:
        from edgetrain.cli.plan_pipeline import plan_pipeline

        if costs is not None:
            raise EdgetrainError("--pipeline takes --profile and/or --recipe, not --costs")
        plan_pipeline(
            profile=profile, recipe_path=recipe, stages=stages, objective=objective,
            technique=technique, microbatch=microbatch, window_extra=window_extra,
            memory_cap=memory_cap, speeds=speeds, testbed=testbed, hosts=hosts,
            bandwidth=bandwidth, run_dir=run_dir, name=_name_ok(name or "pipeline"), fmt=fmt,
        )  # fmt: skip
        return
    from edgetrain.plan import inputs
    from edgetrain.plan.document import plan_document
    from edgetrain.plan.units import parse_bandwidth, parse_duration

    if (profile is None) == (costs is None):
        raise EdgetrainError("give exactly one of --profile FILE or --costs FILE")
    try:
        rates = [parse_bandwidth(b) for b in bandwidth.split(",")] if bandwidth else [None]
        rtt_s = parse_duration(rtt) if rtt else None
        dt_s = None if dt == "auto" else parse_duration(dt)
    except ValueError as exc:
        raise unit_error(exc) from None
    source = profile if profile is not None else costs
    assert source is not None
    stem = _name_ok(name or source.stem)
    if run_dir is None and profile is not None and profile.parent.name == "profiles":
        run_dir = profile.parent.parent
    docs: list[dict[str, Any]] = []
    results_list = []
    if costs is not None:
        if bandwidth or rtt or dt != "auto":
            raise EdgetrainError(
                "--bandwidth, --rtt and --dt apply to --profile; a cost file "
                "already holds pt, gt and dt"
            )
        doc, results = plan_document(inputs.load_costs(costs))
        docs.append(doc)
        results_list.append(results)
    else:
        prof = inputs.read_profile(profile)  # type: ignore[arg-type]
        for rate in rates:
            link = inputs.link_figures(prof, rate, rtt_s, dt_s)
            layer_costs = inputs.costs_from_profile(prof, link, str(profile))
            doc, results = plan_document(layer_costs, link.bandwidth_Bps, link.dt_source)
            docs.append(doc)
            results_list.append(results)
    out: dict[str, Any] = docs[0] if len(docs) == 1 else {"bandwidths": docs}
    out["input"] = str(source)
    written, existing = _write(out, results_list, run_dir, stem, plot)
    emit(out, fmt, lambda: _render(docs, written, existing))
    if fmt == OutputFormat.json and written:
        if existing is not None:
            err_console.print(renamed_note(existing, written[0]), markup=False)
        err_console.print(f"wrote {', '.join(str(p) for p in written)}")


def _write(
    out: dict[str, Any],
    results_list: list[dict[str, StrategyResult]],
    run_dir: Path | None,
    stem: str,
    plot: bool,
) -> tuple[list[Path], Path | None]:
    """Write the plan (and charts); also the existing plan file kept when one was in the way."""
    from edgetrain.plan.gantt import plot_gantt
    from edgetrain.rundir import atomic_write_json

    folder = (run_dir / "plans") if run_dir is not None else None
    if folder is None:
        if plot:
            raise EdgetrainError("--plot needs a place to write: give --run-dir RUN")
        return [], None
    if not run_dir.is_dir():  # type: ignore[union-attr]
        raise EdgetrainError(f"run directory {run_dir} does not exist")
    folder.mkdir(exist_ok=True)
    suffixes = [f"-{d['bandwidth']}" for d in out["bandwidths"]] if "bandwidths" in out else [""]
    new = free_stem(folder, stem, lambda s: [f"{s}{x}.png" for x in suffixes] if plot else [])
    existing = folder / f"{stem}.json" if new != stem else None
    written = [folder / f"{new}.json"]
    atomic_write_json(written[0], out)
    if plot:
        for results, suffix in zip(results_list, suffixes, strict=True):
            written.append(plot_gantt(results, folder / f"{new}{suffix}.png", f"{new}{suffix}"))
    return written, existing


def _render(docs: list[dict[str, Any]], written: list[Path], existing: Path | None) -> None:
    from edgetrain.plan.units import describe_bandwidth

    for doc in docs:
        rate = doc.get("bandwidth_Bps")
        title = f"plan at {describe_bandwidth(rate)}" if rate is not None else "plan"
        table = Table(title=f"{title} · {doc['layers']} layers · dt {doc['dt_s'] * 1e3:.3g} ms")
        for col in ("strategy", "forward s", "backward s", "iteration s", "speed-up", "segments"):
            table.add_column(col, justify="left" if col == "strategy" else "right")
        best = min(s["iteration_s"] for s in doc["strategies"].values())
        for sname, s in doc["strategies"].items():
            style = "bold green" if s["iteration_s"] <= best * (1 + 1e-12) else ""
            table.add_row(
                sname,
                f"{s['forward_s']:.4g}",
                f"{s['backward_s']:.4g}",
                f"{s['iteration_s']:.4g}",
                f"{s['speedup_vs_sequential']:.2f}x",
                f"{len(s['forward_cuts']) + 1}/{len(s['backward_cuts']) + 1}",
                style=style,
            )
        console.print(table)
        colour = "green" if doc["verdict"]["scheduling_helps"] else "yellow"
        console.print(f"[{colour}]{doc['verdict']['text']}[/]")
    if existing is not None and written:
        console.print(renamed_note(existing, written[0]), markup=False)
    for path in written:
        console.print(f"wrote {path}")
