"""The pipeline plan file, ``RUN/plans/<name>.json``: a partition and what it was made from.

``edgetrain plan --pipeline`` writes it; ``launch`` reads it through ``[pipeline] plan`` and
checks that it was made for the same model (unit names) and as many stages. Pure apart from
nothing: the caller reads and writes the JSON."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from edgetrain.errors import RecipeError
from edgetrain.pipeline.partition import Partition
from edgetrain.pipeline.predict import Shape, predict_pipelined, stage_costs, stage_memory
from edgetrain.pipeline.table import UnitInfo
from edgetrain.runtime.predict import Setting

SCHEMA_VERSION = 1
KIND = "pipeline-partition"


def plan_document(
    infos: Sequence[UnitInfo],
    part: Partition,
    objective: str,
    *,
    technique: str,
    store: str,
    setting: Setting,
    shape: Shape,
    timed: bool,
    model: str,
    inputs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The plan as plain data: the cuts, and what the cost model
    (:mod:`edgetrain.pipeline.predict`) predicts for them on ``setting``. ``timed``: the
    layers' times are a profile's seconds (else multiply-accumulates: no ``predicted``)."""
    shape = replace(shape, bounds=tuple(part.bounds))
    costs = stage_costs(setting, shape)
    stages = []
    for s, (lo, hi) in enumerate(part.bounds):
        st, mem = costs[s], stage_memory(infos, shape, s)
        device = setting.devices[shape.workers[s]]
        nxt = s + 1 < len(part.bounds)
        link = setting.link(shape.workers[s], shape.workers[s + 1]) if nxt else None
        entry: dict[str, Any] = {
            "index": s,
            "units": [lo, hi],
            "unit_names": [u.name for u in infos[lo:hi]],
            "params": mem.params,
            "m": st.m,
            "cost": part.costs[s],
            "est_time": st.compute_s,
            "est_comm_s": st.link_s,
            "est_memory": {
                "resident": mem.resident,
                "transient": mem.transient,
                "activations": mem.activations,
            },
            "cap_bytes": device.memory_bytes,
            "speed": device.speed,
            "link_Bps": link.bandwidth_Bps if link is not None else None,
        }
        if timed:
            entry["predicted"] = {
                "compute_s": st.compute_s,
                "replay_s": st.replay_s,
                "link_s": st.link_s,
                "resident_bytes": st.resident_bytes,
            }
        stages.append(entry)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "model": model,
        "objective": objective,
        "technique": technique,
        "store": store,
        "microbatch": shape.microbatch,
        "window_extra": shape.extra,
        "window": shape.uniform,
        "time_source": "profile" if timed else "multiply-accumulates",
        "units": [u.to_dict() for u in infos],
        "stages": stages,
        "bottleneck": part.bottleneck,
        "predicted": _predicted(technique, setting, shape) if timed else None,
        "inputs": dict(inputs or {}),
    }


def _predicted(technique: str, setting: Setting, shape: Shape) -> dict[str, Any]:
    """The cost model's iteration for the cuts (what the family's ``predict`` hook answers
    for the same cuts and setting)."""
    p = predict_pipelined(technique, setting, shape)
    return {
        "iteration_s": p.iteration_s,
        "samples_per_s": shape.microbatch / p.iteration_s if p.iteration_s > 0 else None,
        "microbatches": shape.microbatches,
        "parts": dict(p.parts),
        "bytes_per_iteration": p.bytes_per_iteration,
        "memory_bytes": {str(s): p.memory_bytes[w] for s, w in enumerate(shape.workers)},
        "notes": list(p.notes),
    }


def bounds_from_plan(
    doc: object, unit_names: Sequence[str], stages: int, source: str
) -> list[tuple[int, int]]:
    """The stage bounds of a plan document, checked against the model and the stage count."""
    fix = "write it again with `edgetrain plan --pipeline ... --run-dir RUN` for this recipe"
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise RecipeError(f"[pipeline] plan: {source} is not a pipeline plan", fix)
    names = [u.get("name") for u in doc.get("units", []) if isinstance(u, dict)]
    if names != list(unit_names):
        raise RecipeError(
            f"[pipeline] plan: {source} was made for another model ({len(names)} units, the "
            f"recipe's model has {len(unit_names)})",
            fix,
        )
    entries = doc.get("stages")
    if not isinstance(entries, list) or len(entries) != stages:
        got = len(entries) if isinstance(entries, list) else 0
        raise RecipeError(
            f"[pipeline] plan: {source} has {got} stages, the recipe has {stages} stage workers",
            fix,
        )
    out: list[tuple[int, int]] = []
    lo = 0
    for e in entries:
        units = e.get("units") if isinstance(e, dict) else None
        ok = isinstance(units, list) and len(units) == 2 and all(isinstance(x, int) for x in units)
        if not ok or units[0] != lo or not units[0] < units[1]:  # type: ignore[index]
            raise RecipeError(f"[pipeline] plan: {source} has stages that are not contiguous", fix)
        out.append((int(units[0]), int(units[1])))  # type: ignore[index]
        lo = int(units[1])  # type: ignore[index]
    if lo != len(unit_names):
        raise RecipeError(f"[pipeline] plan: {source} does not cover every unit", fix)
    return out
