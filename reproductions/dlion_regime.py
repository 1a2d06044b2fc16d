"""Regime first, for the DLion reproduction: before any measured run, the gossip family's cost
model (each technique's ``predict`` hook, :mod:`edgetrain.gossip.exchange.cost_model`) predicts
DLion with and without capacity-aware batching, Gaia and Ako on every setting of a map: each
candidate workload (model, b0) on ``dlion-compute-4`` at the emulator's 100 ms CPU quota
period and at a short one (10 ms), and on ``dlion-network-4``. The layers come from each
workload's profile measured on one emulated host (``edgetrain profile`` inside the fast host
of ``dlion-compute-4``, one torch thread as a worker has). The prediction is written to
``OUT/regime.json`` once and never rewritten (a resumed reproduction reads it back), and it
chooses R-DL-1's setting: the compute setting where the predicted batching cut is largest
(the paper: 34%, the bound 1 - k C_min / sum C = 33% at 3:1). The compute setting it predicts
the least cut on runs as a measured control, on fewer seeds.

The reference device is one unthrottled core: the profiler's estimator (the mean of the
faster half of its runs) sees a host's burst pace while a step fits its quota (the fast
host's 90 ms of every 100), so a device's speed is its host's cores (``reference_cpu`` 1), and
under a quota period (``Device.quota_period_s``, from the testbed's facts) a stretch of work
runs at that pace until the quota is spent. With ``--testbed local`` there is no quota: one
setting per testbed, uniformly slow devices.

The cost model predicts time per sample at the planned batches, not accuracy: a run's time to
a target also pays for what batching does to the gradient (Eq. 5 weighs every worker 1/k).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment.beds import Bed, BedSpec, facts_of
from edgetrain.experiment.kept import check_covers, kept
from edgetrain.experiment.profiling import profile_argv, profile_in_host
from edgetrain.gossip.config import AkoSection, DLionSection, ExchangeSection, GaiaSection
from edgetrain.gossip.exchange.cost_calibration import Calibration
from edgetrain.recipe import Recipe
from edgetrain.runtime.predict import Setting as ModelSetting
from edgetrain.runtime.setting_build import TestbedFacts
from reproductions.dlion_claims import ideal_cut
from reproductions.dlion_plan import ARMS, BEDS, DEFAULT_PERIOD_MS, Plan, compute_bed, recipe
from reproductions.dlion_regime_claims import GAIN

Say = Callable[[str], None]
PREDICTED_ARMS = ("dlion", "dlion-nobatch", "gaia", "ako")
SECTIONS: dict[str, type[ExchangeSection]] = {
    "dlion": DLionSection,
    "gaia": GaiaSection,
    "ako": AkoSection,
}
REFERENCE_CPU = 1.0  # the profile's device: one unthrottled core (see the docstring)
PROFILE_HOST = "fast"  # dlion-compute-4's 0.9-core host
RULE = (
    "the compute setting (workload x CPU quota period) where the cost model predicts the largest "
    "cut in time per sample from capacity-aware batching (ties: the shorter CPU quota period, "
    "then the first of the map); the "
    "control: the compute setting with the least predicted cut"
)


@dataclass(frozen=True)
class Setting:
    """One setting of the map: a workload on a testbed at a CPU quota period (ms; None: local
    processes, no quota)."""

    model: str
    b0: int
    bed: str  # compute or network
    period_ms: int | None

    @property
    def workload(self) -> str:
        return f"{self.model}-b{self.b0}"

    @property
    def key(self) -> str:
        where = self.bed if self.period_ms is None else f"{self.bed}-p{self.period_ms}"
        return f"{self.workload}@{where}"


def settings_of(p: Plan) -> list[Setting]:
    """The map: every candidate on dlion-compute-4 at every period, then on dlion-network-4 at
    the emulator's period (compute first, the plan's own workload and period first)."""
    out = [Setting(m, b, "compute", per) for m, b in p.workloads for per in p.periods]
    net = None if p.periods == (None,) else DEFAULT_PERIOD_MS
    return out + [Setting(m, b, "network", net) for m, b in p.workloads]


def check_kept_regime(p: Plan, out: Path) -> None:
    """Refuse an ``--out`` whose kept ``regime.json`` leaves out a setting of this plan's map
    (another plan wrote it: ``--quick``, say). Reads the file only."""
    check_covers(out / "regime.json", (s.key for s in settings_of(p)), same={"dataset": p.dataset})


def bed_spec(s: Setting) -> BedSpec:
    """The testbed a setting runs on."""
    return compute_bed(s.period_ms) if s.bed == "compute" else BEDS[s.bed]


def profile_workload(
    model: str, dataset: str, b0: int, b: Bed, out: Path, say: Say
) -> dict[str, Any]:
    """The workload's profile on the fast host of ``b`` (here, for local processes), one torch
    thread, kept in ``OUT/profiles``."""
    host = PROFILE_HOST if b.hosts is not None else "local"
    argv = profile_argv(model, dataset, b0, host, threads=1)
    path = out / "profiles" / f"{model}-{dataset}-b{b0}.json"
    return profile_in_host(b, host, argv, path, say, f"{model} at b0 = {b0}")


def arm_recipe(p: Plan, arm: str, s: Setting, data: Mapping[str, Any], lr: float) -> Recipe:
    """``arm``'s recipe on setting ``s`` as local processes have it (the sites in the section)."""
    from edgetrain.recipe import parse_recipe
    from edgetrain.tomlconfig import loads

    local = Bed(bed_spec(s))
    text = recipe(replace(p, model=s.model, b0=s.b0), arm, local, dict(data), lr, None)
    return parse_recipe(loads(text.format(seed=1)), "the arm's recipe")


def model_setting(s: Setting, facts: TestbedFacts, profile: Mapping[str, Any]) -> ModelSetting:
    """The cost model's setting: the testbed's devices and links, the profile's layers."""
    from edgetrain.runtime.setting_build import layers_from_profile, setting_from_testbed

    layers = layers_from_profile(profile, s.b0)
    return setting_from_testbed(facts, layers, reference_cpu=REFERENCE_CPU, batch=s.b0)


def predict_arm(
    p: Plan,
    arm: str,
    s: Setting,
    facts: TestbedFacts,
    profile: Mapping[str, Any],
    data: Mapping[str, Any],
    lr: float,
    calibration: Calibration | None = None,
) -> dict[str, Any]:
    """One arm's predicted iteration on setting ``s``: its time, samples, time per sample, the
    planned batches and the model's notes; ``calibration``: a pilot's measured terms, the
    model's extra included (:func:`~edgetrain.gossip.exchange.cost_dlion.calibrated`)."""
    from edgetrain.gossip.exchange.cost_dlion import plan_of
    from edgetrain.gossip.exchange.cost_model import exchange_shape, predict_recipe

    technique = ARMS[arm][0]
    rec = arm_recipe(p, arm, s, data, lr)
    setting = model_setting(s, facts, profile)
    section = SECTIONS[technique]
    pred = predict_recipe(rec, setting, section, calibration)
    if pred is None:
        return {"technique": technique, "iteration_s": None}
    k = len(setting.devices)
    batches = [s.b0] * k
    if technique == "dlion":
        cfg = DLionSection.of(rec)
        shape = replace(exchange_shape(rec, cfg), calibration=calibration)
        planned, _ = plan_of(setting, shape, cfg)
        batches = [planned[w] for w in sorted(planned)]
    samples = sum(batches)
    return {
        "technique": technique,
        "iteration_s": pred.iteration_s,
        "samples": samples,
        "sample_s": pred.iteration_s / samples,
        "samples_per_s": samples / pred.iteration_s,
        "batches": batches,
        "parts": dict(pred.parts),
        "notes": list(pred.notes),
    }


def cut(arms: Mapping[str, Mapping[str, Any]], arm: str, base: str) -> float | None:
    """How much less time per sample ``arm`` is predicted to take than ``base``, in percent."""
    a, b = (arms.get(arm) or {}).get("sample_s"), (arms.get(base) or {}).get("sample_s")
    return 100.0 * (1.0 - a / b) if a and b else None


def predict_setting(
    p: Plan,
    s: Setting,
    profile: Mapping[str, Any],
    data: Mapping[str, Any],
    lr: float,
    measured: Calibration | None = None,
) -> dict[str, Any]:
    """Every arm of ``s`` predicted, with the batching cut and DLion's against the baselines;
    ``measured``: a pilot's terms (DLion without batching at b0) to calibrate the model on."""
    from edgetrain.gossip.exchange.cost_dlion import calibrated
    from edgetrain.gossip.exchange.cost_model import exchange_shape

    spec = bed_spec(s)
    facts = facts_of(spec, p.local)
    cal = None
    if measured is not None:
        rec = arm_recipe(p, "dlion-nobatch", s, data, lr)
        cfg = DLionSection.of(rec)
        setting = model_setting(s, facts, profile)
        cal = calibrated(setting, exchange_shape(rec, cfg), cfg, measured)
    arms = {a: predict_arm(p, a, s, facts, profile, data, lr, cal) for a in PREDICTED_ARMS}
    batching = cut(arms, "dlion", "dlion-nobatch")
    return {
        "workload": s.workload,
        "model": s.model,
        "b0": s.b0,
        "bed": s.bed,
        "testbed": spec.name,
        "period_ms": s.period_ms,
        "quota": s.period_ms is not None,
        "arms": arms,
        "batching_cut": batching,
        "bound": ideal_cut(spec.shares),
        "predicts_gain": None if batching is None else batching >= GAIN,
        "vs_gaia": cut(arms, "dlion", "gaia"),
        "vs_ako": cut(arms, "dlion", "ako"),
    }


def choose(predicted: Mapping[str, Mapping[str, Any]]) -> tuple[str, str | None]:
    """R-DL-1's setting, the compute setting with the largest predicted batching cut (ties: the
    shorter CPU quota period, then the first), and the control, the compute setting with the
    least (None: only one). Pure.

    The model times each host's stalls under its quota but not that an iteration waits for the
    worst-placed stall among several hosts, so where it predicts one cut for two periods the
    shorter is the slow device a quota stands for (a 0.3-core host runs 3 ms and stalls 7, not
    30 and 70): in the quick reproduction of commit 308b800 at 100 ms the three identical
    0.3-core hosts waited 24-44% of the time for each other without batching."""
    compute = [k for k, v in predicted.items() if v.get("bed") == "compute"]
    if not compute:
        raise EdgetrainError("the regime map has no compute setting to choose from")

    def score(key: str) -> float:
        v = predicted[key].get("batching_cut")
        return float(v) if isinstance(v, (int, float)) else float("-inf")

    def period(key: str) -> float:
        v = predicted[key].get("period_ms")
        return float(v) if isinstance(v, (int, float)) else 0.0  # None: no quota

    chosen = max(compute, key=lambda k: (score(k), -period(k), -compute.index(k)))
    rest = [k for k in compute if k != chosen]
    control = min(rest, key=lambda k: (score(k), rest.index(k))) if rest else None
    return chosen, control


def regime_document(
    predicted: Mapping[str, Any],
    chosen: str,
    control: str | None,
    p: Plan,
    lr: float,
    commit: Mapping[str, Any],
) -> dict[str, Any]:
    """What ``OUT/regime.json`` holds: when and by which code the prediction was made, the
    chosen setting and the control and why, and the map."""
    return {
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit.get("commit"),
        "commit_dirty": commit.get("dirty"),
        "before_measured_runs": True,
        "dataset": p.dataset,
        "candidates": [f"{m}-b{b}" for m, b in p.workloads],
        "periods_ms": list(p.periods),
        "chosen": chosen,
        "control": control if p.control else None,
        "rule": RULE,
        "gain_at_least": GAIN,
        "reference": f"one unthrottled core (reference_cpu {REFERENCE_CPU:g}): the profile "
        f"measured on {PROFILE_HOST} of dlion-compute-4",
        "lr": lr,
        "settings": dict(predicted),
    }


def phase_regime(
    p: Plan, b: Bed, out: Path, data: Mapping[str, Any], say: Say, lr: float
) -> dict[str, Any]:
    """Profile every candidate on the fast host of ``b`` (dlion-compute-4), predict the map,
    choose R-DL-1's setting and the control, and write ``OUT/regime.json``: once, before the
    first measured run (a resumed reproduction reads the same prediction back)."""
    from edgetrain.experiment.report import code_commit

    def make() -> dict[str, Any]:
        profiles = {
            f"{m}-b{b0}": profile_workload(m, p.dataset, b0, b, out, say) for m, b0 in p.workloads
        }
        predicted = {
            s.key: predict_setting(p, s, profiles[s.workload], data, lr) for s in settings_of(p)
        }
        chosen, control = choose(predicted)
        say(f"regime: the cost model chose {chosen} (predictions in regime.json)")
        return regime_document(predicted, chosen, control, p, lr, code_commit())

    return dict(kept(out / "regime.json", make))


def chosen_setting(regime: Mapping[str, Any], key: str = "chosen") -> Setting | None:
    """The setting the regime chose (``key`` "control": its control), None when it has none."""
    name = regime.get(key)
    doc = (regime.get("settings") or {}).get(name) if isinstance(name, str) else None
    if not doc:
        return None
    return Setting(doc["model"], int(doc["b0"]), doc["bed"], doc.get("period_ms"))


def needs_profile(out: Path) -> bool:
    """Whether the regime is still to be predicted (no ``OUT/regime.json`` yet)."""
    return not (out / "regime.json").is_file()
