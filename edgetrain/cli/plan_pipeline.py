"""``edgetrain plan --pipeline``: cut a model into pipeline stages and write RUN/plans/NAME.json.

The unit table comes from the recipe's model (or the profile's), per-unit times from the
profile (scaled to the microbatch) or, without one, from multiply-accumulates; host memory caps
and speeds from ``--memory-cap``/``--speeds``, a testbed spec (``--testbed``, its hosts in
order) or a hosts file's ``memory`` (``--hosts``, the stages' slots in order). The exact
min-max partitioner does the rest (:mod:`edgetrain.pipeline.partition`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from edgetrain.cli.common import OutputFormat, console, emit, err_console
from edgetrain.cli.plan_files import free_stem, renamed_note, unit_error
from edgetrain.errors import EdgetrainError

MiB = 2**20


def _sizes(text: str | None, n: int, what: str) -> list[int | None]:
    from edgetrain.emulate.spec import parse_size

    if not text:
        return [None] * n
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1:
        parts = parts * n
    if len(parts) != n:
        raise EdgetrainError(f"{what} lists {len(parts)} sizes for {n} stages; give one or {n}")
    try:
        return [parse_size(p) for p in parts]
    except ValueError as exc:
        raise EdgetrainError(f"{what}: {exc}") from None


def _floats(text: str | None, n: int, what: str) -> list[float]:
    if not text:
        return [1.0] * n
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1:
        parts = parts * n
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise EdgetrainError(f"{what} must be numbers, e.g. 1,1,1.5") from None
    if len(values) != n or any(v <= 0 for v in values):
        raise EdgetrainError(f"{what} needs {n} positive numbers (one per stage)")
    return values


def _testbed(path: Path, n: int) -> tuple[list[int | None], list[float]]:
    """Memory caps and speed factors (1 / CPU share) of the first ``n`` hosts of a spec."""
    from edgetrain.emulate.spec import load_spec

    spec = load_spec(path)
    hosts = [h for site in spec.sites for h in site.hosts]
    if len(hosts) < n:
        raise EdgetrainError(f"testbed {path} has {len(hosts)} hosts for {n} stages")
    return [h.memory for h in hosts[:n]], [1.0 / h.cpu for h in hosts[:n]]


def _hosts_caps(path: Path, n: int) -> list[int | None]:
    """The memory of the host each of the first ``n`` worker slots is on (hosts in file order,
    ``workers`` slots each: the stages when the recipe lists them first)."""
    from edgetrain.launch.hosts import load_hosts

    cfg, _ = load_hosts(path)
    slots = [h for h in cfg.hosts for _ in range(h.workers)]
    if len(slots) < n:
        raise EdgetrainError(f"hosts file {path} has {len(slots)} worker slots for {n} stages")
    return [h.memory for h in slots[:n]]


def _profile_times(profile: dict[str, Any], units: list[Any], microbatch: int) -> list[float]:
    """Per-unit fwd + bwd seconds from a profile's layers (matched by name), scaled from the
    profile's batch size to the microbatch."""
    layers = {str(x.get("name")): x for x in profile.get("layers", []) if isinstance(x, dict)}
    batch = (profile.get("batch_sizes") or [microbatch])[0]
    out = []
    for unit in units:
        total = 0.0
        for leaf in unit.leaves:
            name = unit.state_name(leaf.local)
            if name not in layers:
                raise EdgetrainError(
                    f"the profile has no layer {name!r}: it was made for another model",
                    "profile the recipe's model (edgetrain profile --model ...)",
                )
            total += float(layers[name]["fwd_s"]) + float(layers[name]["bwd_s"])
        out.append(total * microbatch / batch)
    return out


def plan_pipeline(
    *,
    profile: Path | None,
    recipe_path: Path | None,
    stages: int | None,
    objective: str,
    technique: str | None,
    microbatch: int | None,
    window_extra: int | None,
    memory_cap: str | None,
    speeds: str | None,
    testbed: Path | None,
    hosts: Path | None,
    bandwidth: str | None,
    run_dir: Path | None,
    name: str,
    fmt: OutputFormat,
) -> None:
    import torch

    from edgetrain.models import build_model
    from edgetrain.pipeline.chain import build_units
    from edgetrain.pipeline.config import PipelineSection
    from edgetrain.pipeline.costs import OBJECTIVES, Setting, cost_function
    from edgetrain.pipeline.partition import PartitionError, partition
    from edgetrain.pipeline.partition_file import plan_document
    from edgetrain.pipeline.table import unit_table
    from edgetrain.plan.units import parse_bandwidth
    from edgetrain.profile.schema import read_profile
    from edgetrain.rundir import atomic_write_json

    if objective not in OBJECTIVES:
        raise EdgetrainError(f"--objective {objective!r}: use one of {', '.join(OBJECTIVES)}")
    if profile is None and recipe_path is None:
        raise EdgetrainError("--pipeline needs --recipe RECIPE or --profile FILE (or both)")
    prof = read_profile(profile) if profile is not None else None
    if recipe_path is not None:
        from edgetrain.launch.api import load_checked_recipe
        from edgetrain.runtime.setup import load_run_data

        recipe, _ = load_checked_recipe(recipe_path)
        data = load_run_data(recipe)
        model_name, options = recipe.model.name, recipe.model.options
        shape, classes = data.input_shape, data.classes
        cfg = PipelineSection.of(recipe)
        tech = technique or recipe.train.technique
        b = microbatch or cfg.microbatch or recipe.train.batch_size
        extra = window_extra if window_extra is not None else cfg.window_extra
        uniform, store = cfg.window, cfg.store
        momentum = recipe.train.momentum > 0
        n = stages or recipe.role_names().count("stage")
    else:
        assert prof is not None
        if not prof.get("model") or not prof.get("input"):
            raise EdgetrainError(f"profile {profile} has no model; give --recipe RECIPE")
        model_name, options = str(prof["model"]), {}
        dims = [int(d) for d in prof["input"]]
        shape, classes = (dims[0], dims[1], dims[2]), 10
        tech = technique or "pipedream"
        b = microbatch or int((prof.get("batch_sizes") or [16])[0])
        extra, uniform, store, momentum = window_extra or 0, None, "mixed", False
        n = stages or 0
    if n < 1:
        raise EdgetrainError("give --stages N (or a recipe with stage workers)")
    with torch.device("meta"):
        model = build_model(model_name, shape, classes, options)
    units = build_units(model, model_name)
    infos = unit_table(units, shape)
    times = _profile_times(prof, units, b) if prof is not None and prof.get("layers") else None
    caps, speed = _sizes(memory_cap, n, "--memory-cap"), _floats(speeds, n, "--speeds")
    if testbed is not None and hosts is not None:
        raise EdgetrainError("give --testbed SPEC or --hosts FILE, not both")
    if testbed is not None:
        caps, speed = _testbed(testbed, n)
    if hosts is not None:
        caps = _hosts_caps(hosts, n)
    try:
        rate = parse_bandwidth(bandwidth) if bandwidth else None
    except ValueError as exc:
        raise unit_error(exc) from None
    setting = Setting(
        technique=tech, stages=n, microbatch=b, extra=extra, uniform=uniform, momentum=momentum,
        store=store, speeds=speed, caps=caps, bandwidth=rate, times=times,
    )  # fmt: skip
    try:
        part = partition(len(infos), n, cost_function(infos, objective, setting))
    except PartitionError as exc:
        raise EdgetrainError(f"{exc}", _cap_hint(infos, setting, caps)) from None
    inputs = {
        "profile": str(profile) if profile else None,
        "recipe": str(recipe_path) if recipe_path else None,
        "testbed": str(testbed) if testbed else None,
        "hosts": str(hosts) if hosts else None,
    }
    doc = plan_document(infos, part, objective, setting, model_name, inputs)
    written, existing = None, None
    if run_dir is None and profile is not None and profile.parent.name == "profiles":
        run_dir = profile.parent.parent
    if run_dir is not None:
        if not run_dir.is_dir():
            raise EdgetrainError(f"run directory {run_dir} does not exist")
        folder = run_dir / "plans"
        folder.mkdir(exist_ok=True)
        new = free_stem(folder, name)  # never overwrite a plan a run may have read
        existing = folder / f"{name}.json" if new != name else None
        written = folder / f"{new}.json"
        atomic_write_json(written, doc)
    emit(doc, fmt, lambda: _render(doc, written, existing, rate))
    if fmt == OutputFormat.json and written:
        if existing is not None:
            err_console.print(renamed_note(existing, written), markup=False)
        err_console.print(f"wrote {written}")


def _cap_hint(infos: list[Any], setting: Any, caps: list[int | None]) -> str:
    """The fix for an infeasible partition: the largest unit's memory against the caps."""
    from edgetrain.pipeline.costs import estimate

    worst = max(range(len(infos)), key=lambda k: estimate(infos, k, k + 1, 0, setting).memory)
    need = estimate(infos, worst, worst + 1, 0, setting).memory
    cap = min((c for c in caps if c), default=None)
    unit = infos[worst]
    return (
        f"unit {unit.name} alone needs {need / MiB:.0f} MiB under {setting.technique} "
        f"(m = {setting.m(0)}) against a cap of {cap / MiB if cap else 0:.0f} MiB; use mcpipe, "
        "--objective memory, more stages, or hosts with more memory"
    )


def _render(
    doc: dict[str, Any], written: Path | None, existing: Path | None, rate: float | None
) -> None:
    from edgetrain.plan.units import describe_bandwidth

    table = Table(
        title=f"pipeline plan · {doc['model']} · {doc['technique']} · objective {doc['objective']}"
        f" · b {doc['microbatch']}"
    )
    for col in ("stage", "units", "params", "m", "cost", "resident MiB", "memory MiB", "cap MiB"):
        table.add_column(col, justify="left" if col == "units" else "right")
    for s in doc["stages"]:
        mem = s["est_memory"]
        total = mem["resident"] + mem["transient"] + mem["activations"]
        names = s["unit_names"]
        span = f"{names[0]} .. {names[-1]} ({len(names)})" if len(names) > 1 else names[0]
        cap = s.get("cap_bytes")
        table.add_row(
            str(s["index"]), span, f"{s['params']:,}", str(s["m"]), f"{s['cost']:.4g}",
            f"{mem['resident'] / MiB:.1f}", f"{total / MiB:.1f}",
            f"{cap / MiB:.0f}" if cap else "-",
        )  # fmt: skip
    console.print(table)
    if rate is not None:
        console.print(f"link bandwidth: {describe_bandwidth(rate)}")
    if written is not None:
        if existing is not None:
            console.print(renamed_note(existing, written), markup=False)
        console.print(f"wrote {written}")
