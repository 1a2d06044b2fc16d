"""The DLion reproduction's cost model calibrated on its pilot (the paper's measured terms, as
Mercury's reproduction calibrates Eq. 5): after the pilot of DLion without capacity-aware
batching (seed 0, never reused) on the chosen setting and before its first measured run, the
model predicts every arm of that setting again from what the pilot measured on each host
(:mod:`edgetrain.gossip.exchange.cost_calibration`: the capacity curves its batches are
planned from, its gradient's CPU per step and its loop's CPU per iteration besides). Written
to ``OUT/regime-calibrated.json`` once; a resumed reproduction reads it back.

The a priori map (``regime.json``) still chooses the setting: the calibration needs a run on
it. The calibrated model's error over the measured runs of that setting is R-DL-REc; the
nobatch arm's runs are the pilot's arm at other seeds (their error is the run-to-run spread),
DLion's are a prediction at batches the pilot never ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from edgetrain.experiment.beds import Bed
from edgetrain.experiment.claims import number
from edgetrain.experiment.kept import kept
from edgetrain.gossip.exchange.cost_calibration import Calibration
from reproductions.dlion_plan import Plan
from reproductions.dlion_regime import Setting, predict_setting, profile_workload

Say = Callable[[str], None]
CALIBRATING_ARM = "dlion-nobatch"


def calibration_of(row: Mapping[str, Any]) -> Calibration | None:
    """A pilot row's measured terms (:func:`reproductions.dlion_runs.measure`'s ``terms`` and
    ``curves``), at the run's mean batch (the workers' own samples over their iterations;
    SpeedUpBS may lengthen it), None when a worker lacks one. Pure."""
    terms = row.get("terms") or {}
    curves = row.get("curves") or {}
    if not terms or set(terms) != set(curves):
        return None
    grad: dict[int, float] = {}
    loop: dict[int, float] = {}
    batches = []
    for w, t in terms.items():
        its = number(t.get("iterations"))
        compute, cpu = number(t.get("compute_cpu_s")), number(t.get("cpu_s"))
        samples = number(t.get("computed_samples"))
        if not its or compute is None or cpu is None or not samples:
            return None
        grad[int(w)] = compute / its
        loop[int(w)] = max(0.0, cpu - compute) / its
        batches.append(samples / its)
    if max(batches) - min(batches) > 1e-6 * max(batches):
        return None  # not a uniform run
    try:
        return Calibration(
            batches[0],
            {int(w): [(int(m), float(c)) for m, c in cv] for w, cv in curves.items()},
            grad,
            loop,
        )
    except (TypeError, ValueError):
        return None


def calibrated_map(p: Plan, s: Setting) -> list[Setting]:
    """What the calibration predicts: the chosen setting first, then its model on the same
    testbed at b0 / 2, b0 and 2 b0 (within the pilot's curves, b0 / 8 to 4 b0) at every CPU
    quota period of the plan. CPU time does not depend on the period, and the loop's work not
    on the batch; another testbed's hosts (the network testbed's) were not measured. Pure."""
    out = [s]
    for b0 in sorted({max(1, s.b0 // 2), s.b0, 2 * s.b0}):
        for period in p.periods:
            c = Setting(s.model, b0, s.bed, period)
            if c not in out:
                out.append(c)
    return out


def phase_calibrated(
    p: Plan,
    s: Setting,
    pilot: Mapping[str, Any],
    b: Bed,
    out: Path,
    data: Mapping[str, Any],
    lr: float,
    say: Say,
) -> dict[str, Any] | None:
    """Every arm of ``s`` and of :func:`calibrated_map`'s other settings predicted from the
    pilot's measured terms (taken on ``s``), written to
    ``OUT/regime-calibrated.json`` once, after the pilot and before the first measured run
    (None where the pilot measured no usable terms)."""
    from edgetrain.experiment.report import code_commit

    path = out / "regime-calibrated.json"
    measured = calibration_of(pilot)
    if measured is None and not path.is_file():
        return None

    def make() -> dict[str, Any]:
        assert measured is not None
        profile = profile_workload(s.model, p.dataset, s.b0, b, out, say)  # kept: the regime's
        name = Path(str(pilot.get("run"))).name
        settings = {}
        for c in calibrated_map(p, s):
            got = predict_setting(p, c, profile, data, lr, measured)
            settings[c.key] = got
            say(
                f"regime (calibrated on {name}): {c.key}: batching cut "
                f"{got['batching_cut']:.1f}% predicted"
            )
        commit = code_commit()
        return {
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": commit.get("commit"),
            "commit_dirty": commit.get("dirty"),
            "before_measured_runs": True,
            "calibrated_on": {
                "run": Path(str(pilot.get("run"))).name,
                "arm": CALIBRATING_ARM,
                "batch": measured.batch,
                "gradient_cpu_ms": {str(w): 1e3 * v for w, v in measured.gradient_cpu_s.items()},
                "loop_cpu_ms": {str(w): 1e3 * v for w, v in measured.loop_cpu_s.items()},
            },
            "chosen": s.key,
            "settings": settings,
        }

    return dict(kept(path, make))
