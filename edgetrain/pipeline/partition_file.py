"""The pipeline plan file, ``RUN/plans/<name>.json``: a partition and what it was made from.

``edgetrain plan --pipeline`` writes it; ``launch`` reads it through ``[pipeline] plan`` and
checks that it was made for the same model (unit names) and as many stages. Pure apart from
nothing: the caller reads and writes the JSON."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from edgetrain.errors import RecipeError
from edgetrain.pipeline.costs import Setting, estimate
from edgetrain.pipeline.partition import Partition
from edgetrain.pipeline.table import UnitInfo

SCHEMA_VERSION = 1
KIND = "pipeline-partition"


def plan_document(
    infos: Sequence[UnitInfo],
    part: Partition,
    objective: str,
    setting: Setting,
    model: str,
    inputs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The plan as plain data."""
    stages = []
    for s, (lo, hi) in enumerate(part.bounds):
        e = estimate(infos, lo, hi, s, setting)
        stages.append(
            {
                "index": s,
                "units": [lo, hi],
                "unit_names": [u.name for u in infos[lo:hi]],
                "params": e.params,
                "m": e.m,
                "cost": part.costs[s],
                "est_time": e.time,
                "est_comm_s": e.comm,
                "est_memory": {
                    "resident": e.resident,
                    "transient": e.transient,
                    "activations": e.activations,
                },
                "cap_bytes": setting.cap(s),
            }
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "model": model,
        "objective": objective,
        "technique": setting.technique,
        "store": setting.store,
        "microbatch": setting.microbatch,
        "window_extra": setting.extra,
        "window": setting.uniform,
        "time_source": "profile" if setting.times is not None else "multiply-accumulates",
        "units": [u.to_dict() for u in infos],
        "stages": stages,
        "bottleneck": part.bottleneck,
        "inputs": dict(inputs or {}),
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
