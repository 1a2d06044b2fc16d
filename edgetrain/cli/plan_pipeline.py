"""``edgetrain plan --pipeline``: cut a model into pipeline stages and write RUN/plans/NAME.json.

The unit table comes from the recipe's model (or the profile's), per-unit times from the
profile (scaled to the microbatch) or, without one, from multiply-accumulates; host memory caps
and speeds from ``--memory-cap``/``--speeds``, a testbed spec (``--testbed``: its worker slots
in order, their CPU shares over the profile's and the paths' rates, as the run's report reads
them) or a hosts file's ``memory`` (``--hosts``, the stages' slots in order); links from
``--bandwidth``, the testbed, or loopback. The family's cost model
(:mod:`edgetrain.pipeline.predict`) chooses the cuts with the exact min-max partitioner and
predicts the time per microbatch the run's report will set beside the measured one."""

from __future__ import annotations

from dataclasses import replace
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


def _testbed_setting(path: Path, n: int, layers: tuple[Any, ...], reference_cpu: float) -> Any:
    """The cost model's setting of ``n`` stages on a testbed spec's first worker slots, as the
    run's report builds it (:func:`~edgetrain.runtime.setting_build.setting_from_testbed`)."""
    from edgetrain.emulate.spec import load_spec
    from edgetrain.emulate.topology import spec_facts
    from edgetrain.runtime.setting_build import setting_from_testbed

    spec = load_spec(path)
    facts = spec_facts(spec)
    try:
        return setting_from_testbed(facts, layers, reference_cpu=reference_cpu, workers=n)
    except ValueError as exc:
        raise EdgetrainError(f"--testbed {path}: {exc}") from None


def _reference_cpu(profile: Path | None, prof: dict[str, Any] | None, testbed: Path) -> float:
    """The cores the profile was measured with: its CPU quota's where it was measured under one,
    else its host's CPU share on the testbed (the profile file is named after its host), else
    its device's cores, else 1."""
    from edgetrain.emulate.spec import load_spec
    from edgetrain.runtime.setting_build import profile_cores

    quota_cores = profile_cores(prof, 0.0) if prof is not None else 0.0
    if quota_cores > 0:
        return quota_cores
    if profile is not None:
        spec = load_spec(testbed)
        for site in spec.sites:
            for h in site.hosts:
                if h.name == profile.stem:
                    return float(h.cpu)
    device = (prof or {}).get("device") or {}
    return float(device.get("cores") or 1)


def _hosts_caps(path: Path, n: int) -> list[int | None]:
    """The memory of the host each of the first ``n`` worker slots is on (hosts in file order,
    ``workers`` slots each: the stages when the recipe lists them first)."""
    from edgetrain.launch.hosts import load_hosts

    cfg, _ = load_hosts(path)
    slots = [h for h in cfg.hosts for _ in range(h.workers)]
    if len(slots) < n:
        raise EdgetrainError(f"hosts file {path} has {len(slots)} worker slots for {n} stages")
    return [h.memory for h in slots[:n]]


def _profile_times(
    profile: dict[str, Any], units: list[Any], microbatch: int
) -> list[tuple[float, float]]:
    """Per-unit forward and backward seconds from a profile's layers (matched by name), scaled
    from the profile's batch size to the microbatch, and to a sustained step of the pipeline's
    own kernels where the profile timed them (``edgetrain profile --kernels pipeline``;
    :func:`~edgetrain.runtime.setting_build.sustained_scale`)."""
    from edgetrain.runtime.setting_build import sustained_scale

    layers = {str(x.get("name")): x for x in profile.get("layers", []) if isinstance(x, dict)}
    batch = (profile.get("batch_sizes") or [microbatch])[0]
    out = []
    scale = microbatch / batch * sustained_scale(profile, "pipeline")
    for unit in units:
        fwd = bwd = 0.0
        for leaf in unit.leaves:
            name = unit.state_name(leaf.local)
            if name not in layers:
                raise EdgetrainError(
                    f"the profile has no layer {name!r}: it was made for another model",
                    "profile the recipe's model (edgetrain profile --model ...)",
                )
            fwd += float(layers[name]["fwd_s"])
            bwd += float(layers[name]["bwd_s"])
        out.append((fwd * scale, bwd * scale))
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
    from edgetrain.pipeline.lowrank import unit_factors
    from edgetrain.pipeline.partition import PartitionError
    from edgetrain.pipeline.partition_file import plan_document
    from edgetrain.pipeline.predict import OBJECTIVES, Shape, choose, store_of, unit_layers
    from edgetrain.pipeline.store_mode import store_mode
    from edgetrain.pipeline.table import unit_table
    from edgetrain.plan.units import parse_bandwidth
    from edgetrain.profile.schema import read_profile
    from edgetrain.rundir import atomic_write_json
    from edgetrain.runtime.predict import Device, Link, Setting
    from edgetrain.runtime.setting_build import LOOPBACK_BPS

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
        lowrank = cfg.replay == "lowrank" and store_mode(tech) == "pairs"
        n = stages or recipe.role_names().count("stage")
        microbatches = cfg.microbatches
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
        lowrank = False
        n = stages or 0
        microbatches = None
    if n < 1:
        raise EdgetrainError("give --stages N (or a recipe with stage workers)")
    with torch.device("meta"):
        model = build_model(model_name, shape, classes, options)
    units = build_units(model, model_name)
    infos = unit_table(units, shape)
    times = _profile_times(prof, units, b) if prof is not None and prof.get("layers") else None
    layers = unit_layers(infos, b, times)
    if testbed is not None and hosts is not None:
        raise EdgetrainError("give --testbed SPEC or --hosts FILE, not both")
    try:
        rate = parse_bandwidth(bandwidth) if bandwidth else None
    except ValueError as exc:
        raise unit_error(exc) from None
    if testbed is not None:
        ref = _reference_cpu(profile, prof, testbed) if times is not None else 1.0
        setting = _testbed_setting(testbed, n, layers, ref)
        if rate is not None:
            setting = replace(setting, links=(Link(rate),))
    else:
        caps, slowdown = _sizes(memory_cap, n, "--memory-cap"), _floats(speeds, n, "--speeds")
        if hosts is not None:
            caps = _hosts_caps(hosts, n)
        devices = tuple(
            Device(f"stage{s}", speed=1.0 / slowdown[s], memory_bytes=caps[s]) for s in range(n)
        )
        setting = Setting(devices, (Link(rate or LOOPBACK_BPS),), layers, b)
    cuts = Shape(
        workers=tuple(range(n)), bounds=[(0, len(infos))] * n, microbatch=b,
        store=store_of(tech, store), extra=extra, uniform=uniform, microbatches=microbatches,
        momentum=momentum, pair_elems=tuple(u.pair_elems for u in infos),
        replay_factor=unit_factors(b, infos) if lowrank else None,
    )  # fmt: skip
    try:
        part = choose(setting, cuts, objective, infos, links=times is not None)
    except PartitionError as exc:
        raise EdgetrainError(f"{exc}", _cap_hint(infos, setting, cuts, tech)) from None
    inputs = {
        "profile": str(profile) if profile else None,
        "recipe": str(recipe_path) if recipe_path else None,
        "testbed": str(testbed) if testbed else None,
        "hosts": str(hosts) if hosts else None,
    }
    doc = plan_document(
        infos, part, objective, technique=tech, store=store, setting=setting, shape=cuts,
        timed=times is not None, model=model_name, inputs=inputs,
    )  # fmt: skip
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


def _cap_hint(infos: list[Any], setting: Any, shape: Any, technique: str) -> str:
    """The fix for an infeasible partition: the largest unit's memory against the caps."""
    from edgetrain.pipeline.predict import stage_memory

    def need(k: int) -> int:
        cut = [(k, k + 1)] + [(0, 0)] * (len(shape.workers) - 1)
        return stage_memory(infos, replace(shape, bounds=cut), 0).memory

    worst = max(range(len(infos)), key=need)
    caps = [d.memory_bytes for d in setting.devices[: len(shape.workers)]]
    cap = min((c for c in caps if c), default=None)
    m = len(shape.workers) + shape.extra if shape.uniform is None else shape.uniform
    return (
        f"unit {infos[worst].name} alone needs {need(worst) / MiB:.0f} MiB under {technique} "
        f"(m = {m}) against a cap of {cap / MiB if cap else 0:.0f} MiB; use mcpipe, "
        "--objective memory, more stages, or hosts with more memory"
    )


def _predicted_lines(predicted: dict[str, Any] | None) -> list[str]:
    """The cost model's time per microbatch and its parts (or why there is none)."""
    if not predicted:
        return ["no profile: costs are relative (multiply-accumulates); give --profile for "
                "predicted seconds"]  # fmt: skip
    parts = predicted["parts"]
    names = (
        "compute", "replay", "communication", "exposed_communication", "queueing", "overhead",
        "bubble",
    )  # fmt: skip
    text = ", ".join(f"{k.replace('_', ' ')} {parts[k] * 1e3:.2f}" for k in names if k in parts)
    rate = predicted.get("samples_per_s")
    head = f"predicted: {predicted['iteration_s'] * 1e3:.2f} ms per microbatch"
    head += f" ({rate:,.0f} samples/s)" if rate else ""
    notes = [n for n in predicted["notes"] if "samples/s predicted" not in n]
    return [f"{head}; ms: {text}", *notes]


def _render(
    doc: dict[str, Any], written: Path | None, existing: Path | None, rate: float | None
) -> None:
    from edgetrain.plan.units import describe_bandwidth

    table = Table(
        title=f"pipeline plan · {doc['model']} · {doc['technique']} · objective {doc['objective']}"
        f" · b {doc['microbatch']}"
    )
    predicted = doc.get("predicted")
    cols = ["stage", "units", "params", "m", "cost", "resident MiB", "memory MiB", "cap MiB"]
    if predicted:
        cols[5:5] = ["compute ms", "replay ms", "link ms"]
    for col in cols:
        table.add_column(col, justify="left" if col == "units" else "right")
    for s in doc["stages"]:
        mem = s["est_memory"]
        total = mem["resident"] + mem["transient"] + mem["activations"]
        names = s["unit_names"]
        span = f"{names[0]} .. {names[-1]} ({len(names)})" if len(names) > 1 else names[0]
        cap = s.get("cap_bytes")
        row = [
            str(s["index"]), span, f"{s['params']:,}", str(s["m"]), f"{s['cost']:.4g}",
            f"{mem['resident'] / MiB:.1f}", f"{total / MiB:.1f}",
            f"{cap / MiB:.0f}" if cap else "-",
        ]  # fmt: skip
        if predicted:
            st = s["predicted"]
            row[5:5] = [f"{st[k] * 1e3:.2f}" for k in ("compute_s", "replay_s", "link_s")]
        table.add_row(*row)
    console.print(table)
    for line in _predicted_lines(predicted):
        console.print(line, markup=False)
    if rate is not None:
        console.print(f"link bandwidth: {describe_bandwidth(rate)}")
    if written is not None:
        if existing is not None:
            console.print(renamed_note(existing, written), markup=False)
        console.print(f"wrote {written}")
