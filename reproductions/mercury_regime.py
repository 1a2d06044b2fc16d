"""Regime first, for the Mercury reproduction: before any measured run (the pilots included),
Mercury's cost model (:mod:`edgetrain.ps.mercury.predict`, the technique side's ``predict``)
predicts each arm's iteration, Mercury against the uniform ``multips-sgd``, in every cell of
R-M1 (a model at a bandwidth), from each model's profile measured inside one emulated device
(``edgetrain profile`` on ``dev-1``, so the profile already runs at the device's CPU share).
The prediction is written to ``OUT/regime.json`` once, with the time and the commit, and never
rewritten (a resumed reproduction reads it back); the report puts each measured iteration
beside it.

The side's own ``predict(recipe, setting)`` cannot read the local dataset's size or the
devices' cores from a recipe (it then takes the refresh as one chunk); this module knows both
(2,000 MNIST samples a device, 0.45 core), so it calls the model the hook calls with them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgetrain.experiment.beds import Bed
from edgetrain.experiment.claims import Row, median, number
from edgetrain.experiment.kept import check_covers, kept
from edgetrain.experiment.profiling import INPUTS, profile_argv, profile_in_host
from reproductions.mercury_plan import Cell, Plan, data_table, recipe

if TYPE_CHECKING:
    from edgetrain.ps.mercury.predict import Calibration
    from edgetrain.runtime.setting_build import HostFacts

ARMS = ("uniform", "mercury")
HOST = "dev-1"  # the device the profiles are measured on
CORES = 0.45  # a mercury-4u device's CPU share
TRAIN_SAMPLES = {"mnist": 8000, "digits": 1437}  # the training split, all devices together
Say = Callable[[str], None]


def profile_model(model: str, p: Plan, b: Bed, out: Path, say: Say) -> dict[str, Any]:
    """``model``'s profile on :data:`HOST` of the testbed (here for local processes), kept."""
    argv = profile_argv(model, p.dataset, p.batch, HOST)
    path = out / "profiles" / f"{model}-{p.dataset}-b{p.batch}.json"
    return profile_in_host(b, HOST, argv, path, say, model)


def hosts_of(p: Plan, cell: Cell) -> tuple[HostFacts, ...]:
    """The cell's devices as ``emulate up`` describes them: ``CORES`` each under a CPU quota of
    the kernel's period (none for local processes), on links of the cell's rate. The quota
    decides how Mercury's ``auto`` keys resolve (``Settings.for_device``)."""
    from edgetrain.cgroups import CFS_PERIOD_US
    from edgetrain.runtime.setting_build import HostFacts

    period = None if p.local else CFS_PERIOD_US / 1e6
    return tuple(
        HostFacts(f"dev-{k}", CORES, cell.bandwidth * 1_000_000, quota_period_s=period)
        for k in range(1, p.devices + 1)
    )


def predict_arm(
    p: Plan,
    arm: str,
    cell: Cell,
    profile: Mapping[str, Any],
    root: str | None,
    calibration: Calibration | None = None,
) -> dict[str, Any]:
    """One arm's predicted iteration in ``cell``: four devices of :data:`CORES` on their own
    links at the cell's rate (the profile measured on one of them), with the parts and notes;
    ``calibration``: a uniform pilot's measured terms (:class:`~.predict.Calibration`)."""
    from edgetrain.ps.mercury.predict import Shape, predict_mercury
    from edgetrain.ps.mercury.side import run_settings
    from edgetrain.recipe import parse_recipe
    from edgetrain.runtime.setting_build import (
        TestbedFacts,
        layers_from_profile,
        profile_cores,
        setting_from_testbed,
        sustained_scale,
    )
    from edgetrain.tomlconfig import loads

    mine = p.for_model(cell.model)
    facts = TestbedFacts("mercury-4u", hosts_of(p, cell), {})
    # the profile's layers as a sustained step (the quota's waits in), at the device's share
    layers = layers_from_profile(profile, p.batch, sustained_scale(profile))
    setting = setting_from_testbed(
        facts,
        layers,
        reference_cpu=profile_cores(profile, CORES),
        workers=p.devices,
        batch=p.batch,
    )
    text = recipe(mine, arm, data_table(mine, root), 0.001, None).replace("{seed}", "1")
    rec = parse_recipe(loads(text), "the arm's recipe")
    devices = [i for i, r in enumerate(rec.role_names()) if r == "trainer"]
    pixels = 1
    for d in INPUTS[p.dataset].split("x"):
        pixels *= int(d)
    shape = Shape(
        devices,
        p.batch,
        samples_per_device=TRAIN_SAMPLES[p.dataset] // p.devices,
        sample_bytes=pixels + 8,  # one byte a pixel and the label
        cores=None if p.local else CORES,
        calibration=calibration,
    )
    pred = predict_mercury(run_settings(rec), setting, shape)
    budget = mine.budget
    return {
        "technique": pred.technique,
        "iteration_s": pred.iteration_s,
        "parts": dict(pred.parts),
        "notes": list(pred.notes),
        "budget_run_s": pred.iteration_s * budget,  # the whole budget at this pace
    }


def predict_cells(
    p: Plan,
    cells: Sequence[Cell],
    profiles: Mapping[str, Mapping[str, Any]],
    root: str | None,
    calibration: Calibration | None = None,
) -> dict[str, Any]:
    """Every cell's arms predicted, with Mercury's iteration over uniform's. Pure but for the
    cost model's own code."""
    out: dict[str, Any] = {}
    for cell in cells:
        profile = profiles[cell.model]
        arms = {a: predict_arm(p, a, cell, profile, root, calibration) for a in ARMS}
        u, m = arms["uniform"]["iteration_s"], arms["mercury"]["iteration_s"]
        out[cell.key] = {
            "model": cell.model,
            "bandwidth_mbit": cell.bandwidth,
            "seeds": list(cell.seeds),
            "arms": arms,
            "mercury_over_uniform": m / u if u else None,
        }
    return out


def regime_document(
    predicted: Mapping[str, Any], commit: Mapping[str, Any], local: bool, dataset: str
) -> dict[str, Any]:
    """What ``OUT/regime.json`` holds: when and by which code the prediction was made, and the
    predicted iteration of each arm in each cell."""
    return {
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit.get("commit"),
        "commit_dirty": commit.get("dirty"),
        "before_measured_runs": True,
        "dataset": dataset,
        "model": "edgetrain.ps.mercury.predict (Eq. 5's terms: T_cp from the profile, T_cm = "
        "2 (K - 1) / K x P / bandwidth, T_is of the scheduler), with 2,000 samples and "
        f"{CORES} core a device",
        "profiled_on": "local processes" if local else HOST,
        "cells": dict(predicted),
    }


def calibrated_path(out: Path, model: str) -> Path:
    """Where ``model``'s calibrated prediction is kept (:func:`phase_calibrated`)."""
    return out / f"regime-calibrated-{model}.json"


def check_kept_predictions(p: Plan, out: Path) -> None:
    """Refuse an ``--out`` whose kept predictions (``regime.json``, ``regime-calibrated-MODEL
    .json``) leave out a cell of this plan: they were written once, before the first run of
    another plan (``--quick`` at other rates, say), and a resume must not report this plan's
    runs against them. Reads files only."""
    same = {"dataset": p.dataset}
    check_covers(out / "regime.json", (c.key for c in p.cells), "cells", same)
    for model in dict.fromkeys(c.model for c in p.cells):
        keys = (c.key for c in p.cells if c.model == model)
        check_covers(calibrated_path(out, model), keys, "cells", same)


def phase_regime(p: Plan, b: Bed, out: Path, root: str | None, say: Say) -> dict[str, Any]:
    """Profile every model of R-M1 on one device of ``b``, predict every cell and write
    ``OUT/regime.json``: once, before the first measured run."""
    from edgetrain.experiment.report import code_commit

    def make() -> dict[str, Any]:
        models = list(dict.fromkeys(c.model for c in p.cells))
        profiles = {m: profile_model(m, p, b, out, say) for m in models}
        predicted = predict_cells(p, p.cells, profiles, root)
        for key, got in predicted.items():
            say(
                f"regime: {key}: uniform {got['arms']['uniform']['iteration_s']:.3f} s, "
                f"mercury {got['arms']['mercury']['iteration_s']:.3f} s an iteration (predicted)"
            )
        return regime_document(predicted, code_commit(), p.local, p.dataset)

    return dict(kept(out / "regime.json", make))


def calibration_of(pilot: Mapping[str, Any], bandwidth_mbit: int) -> Calibration | None:
    """The uniform pilot's measured ``T_cp`` and ``T_cm`` per iteration at its rate, as the
    cost model's calibration (None: the pilot measured no terms, or ran without link limits).
    Pure."""
    from edgetrain.ps.mercury.predict import Calibration

    t_cp, t_cm = number(pilot.get("t_cp_s")), number(pilot.get("t_cm_s"))
    if t_cp is None or t_cm is None or min(t_cp, t_cm, bandwidth_mbit) <= 0:
        return None
    return Calibration(t_cp, t_cm, bandwidth_mbit * 1e6 / 8)


def phase_calibrated(
    p: Plan, model: str, b: Bed, out: Path, root: str | None, pilot: Mapping[str, Any],
    bandwidth_mbit: int, say: Say,
) -> dict[str, Any] | None:  # fmt: skip
    """Eq. 5 with the measured terms: ``model``'s cells predicted again from its uniform pilot
    (seed 0, never reused) at ``bandwidth_mbit``, written to ``OUT/regime-calibrated-MODEL.json``
    once, after the pilot and before the model's first measured run. None where the pilot
    measured no terms (local processes: no link to calibrate against)."""
    from edgetrain.experiment.report import code_commit

    cal = None if p.local else calibration_of(pilot, bandwidth_mbit)
    if cal is None:
        return None

    def make() -> dict[str, Any]:
        cells = [c for c in p.cells if c.model == model]
        predicted = predict_cells(
            p, cells, {model: profile_model(model, p, b, out, say)}, root, cal
        )
        for key, got in predicted.items():
            say(
                f"regime (calibrated): {key}: uniform {got['arms']['uniform']['iteration_s']:.3f}"
                f" s, mercury {got['arms']['mercury']['iteration_s']:.3f} s an iteration"
            )
        doc = regime_document(predicted, code_commit(), p.local, p.dataset)
        doc["calibrated_on"] = {
            "run": pilot.get("run"),
            "bandwidth_mbit": bandwidth_mbit,
            "t_cp_s": cal.t_cp_s,
            "t_cm_s": cal.t_cm_s,
        }
        return doc

    return dict(kept(calibrated_path(out, model), make))


def merged(docs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The cells of several models' calibrated predictions as one regime. Pure."""
    cells: dict[str, Any] = {}
    for doc in docs.values():
        cells.update(doc.get("cells") or {})
    return {"cells": cells}


def measured_iteration(row: Mapping[str, Any]) -> float | None:
    """A run's measured iteration: the devices' mean ``t_it_s``, else training time over
    iterations. Pure."""
    got = number(row.get("t_it_s"))
    if got is not None:
        return got
    train, its = number(row.get("train_s")), number(row.get("iterations"))
    return train / its if train is not None and its else None


def against_measured(regime: Mapping[str, Any], r_m1: Mapping[str, Sequence[Row]]) -> list[Row]:
    """Each R-M1 run's measured iteration beside its cell's prediction, with the error
    ``|measured / predicted - 1|``. Pure."""
    out = []
    for key, rows in r_m1.items():
        cell = (regime.get("cells") or {}).get(key) or {}
        for r in rows:
            pred = number(((cell.get("arms") or {}).get(r["arm"]) or {}).get("iteration_s"))
            got = measured_iteration(r)
            error = abs(got / pred - 1) if got is not None and pred else None
            out.append(
                {
                    "cell": key,
                    "arm": r["arm"],
                    "seed": r["seed"],
                    "predicted_s": pred,
                    "measured_s": got,
                    "error": error,
                }
            )
    return out


def error_by_seed(rows: Sequence[Row]) -> dict[int, float | None]:
    """Per seed, the median error over that seed's runs (every cell, both arms). Pure."""
    seeds = sorted({int(r["seed"]) for r in rows})
    return {s: median([r["error"] for r in rows if int(r["seed"]) == s]) for s in seeds}
