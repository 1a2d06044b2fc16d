"""The cost model's prediction beside what the run measured (``report/summary.json``'s
``prediction``).

Where the run directory holds a profile (``RUN/profiles/<host>.json``, written by ``edgetrain
profile``), the report builds the run's :class:`~edgetrain.runtime.predict.Setting` and asks the
technique's ``predict`` hook for its iteration:

- **layers**: the reference profile's (the first by file name), scaled to the recipe's batch;
- **devices and links**: from the testbed the run was launched on (``RUN/hosts.toml`` written
  by ``emulate up`` carries its spec in a ``testbed`` table: each host's CPU share over the
  reference profile's, each pair's bottleneck rate, loopback on one host); otherwise every
  worker on this machine at the profile's speed over its ``slowdown``, over loopback.

Measured: each training worker's median ``epoch_s`` over its epochs (the first left out when
there are more, since it holds the warm-up), per iteration: over the most steps any worker took
in that epoch (the steps of one, where every worker takes as many; EdgeGossip's workers train a
share of theirs, and its prediction counts the steps of a whole equal shard). The run's figure
is the median over workers, or, where the model predicts each worker's own busy time
(``Prediction.per_worker``: the gossip family, whose fast workers wait at the barrier outside
their ``epoch_s``), the slowest's, each worker's beside its prediction. ``error`` is measured /
predicted - 1, and a miss by more than 30% gets a line in the report saying so. No profile, no
prediction: the report says how to get one.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgetrain.runtime.predict import Device, Link, Prediction, Setting

MISS = 0.30  # |measured / predicted - 1| above this: the report says the model missed
HOW = "profile the model into the run directory (edgetrain profile --run-dir RUN) to compare"


def measured_iteration(rows: list[dict[str, Any]]) -> float | None:
    """A worker's median seconds per step over its epochs (the first dropped when there are
    more), or None when it reported no steps. Pure."""
    per = []
    for row in rows:
        if row.get("event") != "epoch":
            continue
        steps, seconds = row.get("epoch_steps"), row.get("epoch_s")
        if isinstance(steps, int) and steps > 0 and isinstance(seconds, (int, float)):
            per.append(float(seconds) / steps)
    if len(per) > 1:
        per = per[1:]
    return statistics.median(per) if per else None


def measured_workers(workers: Mapping[int, list[dict[str, Any]]]) -> dict[int, float]:
    """Each worker's median seconds per iteration over its epochs (the first dropped when there
    are more): its ``epoch_s`` over the most steps any worker took in that epoch. Pure."""
    steps: dict[Any, int] = {}
    for rows in workers.values():
        for row in rows:
            n = row.get("epoch_steps")
            if row.get("event") == "epoch" and isinstance(n, int):
                steps[row.get("epoch")] = max(steps.get(row.get("epoch"), 0), n)
    out: dict[int, float] = {}
    for w, rows in workers.items():
        per = []
        for row in rows:
            seconds, most = row.get("epoch_s"), steps.get(row.get("epoch"), 0)
            if row.get("event") == "epoch" and most > 0 and isinstance(seconds, (int, float)):
                per.append(float(seconds) / most)
        if len(per) > 1:
            per = per[1:]
        if per:
            out[w] = statistics.median(per)
    return out


def compare(prediction: Prediction, measured: Mapping[int, float]) -> dict[str, Any]:
    """Prediction beside measurement (pure): the parts, each worker's figure and the run's."""
    mine = prediction.per_worker
    known = [s for w, s in measured.items() if w in mine]
    if known:
        run: float | None = max(known)  # the slowest sets the iteration
    else:
        run = statistics.median(measured.values()) if measured else None
    error = run / prediction.iteration_s - 1 if run is not None and prediction.iteration_s else None
    doc: dict[str, Any] = {
        "technique": prediction.technique,
        "predicted_s": prediction.iteration_s,
        "parts": dict(prediction.parts),
        "notes": list(prediction.notes),
        "measured_s": run,
        "workers": {str(w): s for w, s in sorted(measured.items())},
        "error": error,
        "miss": error is not None and abs(error) > MISS,
    }
    if prediction.memory_bytes:
        doc["memory_bytes"] = {str(w): b for w, b in prediction.memory_bytes.items()}
    if mine:
        doc["predicted_workers"] = {str(w): v for w, v in sorted(mine.items())}
        doc["worker_errors"] = {
            str(w): measured[w] / v - 1 for w, v in sorted(mine.items()) if w in measured and v
        }
    return doc


def _reference_profile(run_dir: Path) -> tuple[str, dict[str, Any]] | None:
    from edgetrain.profile.schema import ProfileError, read_profile

    for path in sorted((run_dir / "profiles").glob("*.json")):
        try:
            doc = read_profile(path)
        except ProfileError:
            continue
        if doc.get("layers"):
            return path.stem, doc
    return None


def _testbed(run_dir: Path) -> Any:
    """The testbed facts ``RUN/hosts.toml`` carries (None: not an emulated testbed's)."""
    from edgetrain import tomlconfig
    from edgetrain.errors import EdgetrainError
    from edgetrain.runtime.setting_build import TestbedFacts

    path = run_dir / "hosts.toml"
    if not path.is_file():
        return None
    try:
        data, _ = tomlconfig.read_toml(path, "hosts file", EdgetrainError, "")
        table = data.get("testbed")
        return TestbedFacts.from_dict(table) if isinstance(table, dict) else None
    except (EdgetrainError, ValueError):
        return None


def run_setting(
    run_dir: Path, manifest: Mapping[str, Any], batch: int
) -> tuple[Setting, dict[str, Any]] | None:
    """The run's setting and where it came from, or None without a profile."""
    from edgetrain.runtime.setting_build import (
        layers_from_profile,
        profile_cores,
        setting_from_testbed,
        sustained_scale,
    )

    found = _reference_profile(run_dir)
    if found is None:
        return None
    name, profile = found
    family = manifest.get("family")
    scale = sustained_scale(profile, family if isinstance(family, str) else None)
    layers = layers_from_profile(profile, batch, scale)
    workers = manifest.get("workers", [])
    facts = _testbed(run_dir)
    if facts is not None:
        cpus = {h.name: h.cpu for h in facts.hosts}
        device = profile.get("device") or {}
        reference = profile_cores(profile, cpus.get(name) or float(device.get("cores") or 1))
        setting = setting_from_testbed(
            facts, layers, reference_cpu=reference, workers=len(workers), batch=batch
        )
        return setting, {"profile": name, "testbed": facts.name, "reference_cpu": reference}
    devices = tuple(
        Device(f"w{w.get('id', i)}", speed=1.0 / float(w.get("slowdown") or 1.0))
        for i, w in enumerate(workers)
    )
    return Setting(devices, (Link(8e9),), layers, batch), {"profile": name, "testbed": None}


def prediction_report(
    run_dir: Path,
    manifest: Mapping[str, Any],
    workers: Mapping[int, list[dict[str, Any]]],
    side: Any,
) -> dict[str, Any] | None:
    """The report's ``prediction`` entry (None: the technique has no cost model); without a
    profile, only why there is none."""
    from edgetrain.errors import EdgetrainError
    from edgetrain.recipe import parse_recipe

    try:
        recipe = parse_recipe(dict(manifest.get("recipe") or {}), "the run's recipe")
    except EdgetrainError:
        return None
    try:
        built = run_setting(run_dir, manifest, recipe.train.batch_size)
    except (ValueError, KeyError, TypeError) as exc:
        return {"unavailable": f"the run's setting could not be built: {exc}"}
    if built is None:
        return {"unavailable": f"no profile in {run_dir / 'profiles'}: {HOW}"}
    setting, source = built
    try:
        prediction = side.predict(recipe, setting)
    except (ValueError, KeyError, ZeroDivisionError) as exc:
        return {"unavailable": f"the cost model cannot predict this run: {exc}", **source}
    if prediction is None:
        return None
    measured = measured_workers(workers)
    return {**compare(prediction, measured), **source}


def markdown(doc: Mapping[str, Any]) -> list[str]:
    """The report's lines for ``doc`` (empty for none)."""
    if not doc:
        return []
    if doc.get("unavailable"):
        return ["", f"- cost model: {doc['unavailable']}"]
    parts = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in doc["parts"].items() if v)
    lines = [
        "",
        "## Cost model: predicted beside measured",
        "",
        f"- setting: profile `{doc.get('profile')}`"
        + (f", testbed `{doc['testbed']}`" if doc.get("testbed") else ", this machine"),
        f"- predicted {doc['predicted_s'] * 1e3:.2f} ms per iteration ({parts})",
    ]
    if doc.get("measured_s") is not None:
        lines.append(
            f"- measured {doc['measured_s'] * 1e3:.2f} ms "
            f"({'the slowest worker' if doc.get('predicted_workers') else 'median over workers'}"
            "): "
            f"{doc['error']:+.0%} against the prediction"
        )
    if doc.get("miss"):
        lines.append(
            f"- **the cost model missed by more than {MISS:.0%}**: a setting it does not model "
            "(shared cores, a busy machine, a profile from another device) or a fault"
        )
    errors = doc.get("worker_errors") or {}
    for w, v in (doc.get("predicted_workers") or {}).items():
        got = (doc.get("workers") or {}).get(w)
        lines.append(
            f"- worker {w}: predicted {v * 1e3:.2f} ms busy per iteration"
            + (f", measured {got * 1e3:.2f} ms ({errors[w]:+.0%})" if got and w in errors else "")
        )
    lines += [f"- {note}" for note in doc.get("notes", [])]
    return lines
