"""The mcPipe reproduction's cost model calibrated on its pilots (as DLion's and Mercury's
reproductions calibrate theirs): after the two pilots (mcPipe and Local, seed 0, never reused)
on the first topology and before its first measured run, the family's model
(:mod:`edgetrain.pipeline.calibration`) takes what each pilot's stages spent per microbatch (their
compute and replay CPU, and the CPU outside their compute blocks) against what it predicted for
them, and predicts the chosen workload's settings again. Written to
``OUT/regime-calibrated.json`` once; a resumed reproduction reads it back.

The Local pilot calibrates Local (one busy host); the mcPipe pilot calibrates every pipelined
arm (PipeDream, GreedyUpdates and mcPipe share its hosts, its unit kernels and its messages;
PipeDream and GreedyUpdates replay nothing). Data parallelism is left out: no pilot measured its
exchange. The a priori map (``regime.json``) still chose the workload; the calibrated model's
error over the measured runs of its settings is R-MP-REc.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from edgetrain.experiment.beds import Bed
from edgetrain.experiment.claims import number
from edgetrain.experiment.kept import kept
from edgetrain.pipeline.calibration import Calibration, StageMeasure, calibrate
from reproductions.mcpipe_accuracy import arm_spec
from reproductions.mcpipe_plan import PIPELINES, Plan
from reproductions.mcpipe_recipes import Workload
from reproductions.mcpipe_regime import arm_model, predict_map, profile_workload
from reproductions.mcpipe_runs import LAPTOP, Ctx

#: which pilot calibrates which arm
PILOT_OF = {"local": "local", **{t: "mcpipe" for t in PIPELINES}}


def measures_of(summary: Mapping[str, Any], cores: float) -> list[StageMeasure] | None:
    """A pilot's stages in order, as measured (None where a stage lacks a figure). Pure."""
    rows = (summary.get("technique_report") or {}).get("stages") or []
    rows = sorted(
        (r for r in rows if isinstance(r, dict) and isinstance(r.get("index"), int)),
        key=lambda r: r["index"],
    )
    out = []
    for r in rows:
        mb = r.get("updates")
        compute, process = number(r.get("compute_cpu_s")), number(r.get("process_cpu_s"))
        replay = number(r.get("replay_cpu_s")) or 0.0
        if not isinstance(mb, int) or mb <= 0 or compute is None or process is None:
            return None
        try:
            out.append(StageMeasure(mb, compute, min(replay, compute), process, cores))
        except ValueError:
            return None
    return out or None


def calibration_for(
    w: Workload,
    technique: str,
    hosts: int,
    profile: Mapping[str, Any],
    p: Plan,
    measured: list[StageMeasure],
) -> Calibration | None:
    """The terms of ``technique``'s pilot on ``hosts`` laptops (None: the pilot's stages are
    not the model's)."""
    from edgetrain.pipeline.family import STAGE, microbatch_of, shape_of
    from edgetrain.pipeline.predict import stage_costs

    w, r = arm_spec(p, w, technique, hosts)
    rec, setting = arm_model(w, r, profile, hosts, "1gbit", LAPTOP.cpu)
    setting = setting.at_batch(microbatch_of(rec))
    shape = shape_of(rec, setting, STAGE)
    if len(shape.workers) != len(measured):
        return None
    costs = stage_costs(setting, shape)
    speeds = [setting.devices[k].speed for k in shape.workers]
    try:
        return calibrate(costs, measured, speeds)
    except ValueError:
        return None


def calibrated_model(cal: Calibration) -> Callable[[Any, Any], Any]:
    """The family's model with ``cal``'s terms, as :func:`predict_arm`'s ``model``."""

    def model(rec: Any, setting: Any) -> Any:
        from edgetrain.pipeline.family import STAGE, microbatch_of, shape_of
        from edgetrain.pipeline.predict import predict_pipelined

        s = setting.at_batch(microbatch_of(rec))
        return predict_pipelined(rec.train.technique, s, cal.apply(shape_of(rec, s, STAGE)))

    return model


def measured_before(out: Path) -> bool:
    """Whether ``OUT/runs`` already holds a measured accuracy run that ended (the calibration
    then comes after it: a resumed run of an older reproduction)."""
    runs = out / "runs"
    return any(runs.glob("acc*/report/summary.json")) or any(runs.glob("x-*/report/summary.json"))


def calibrated_settings(
    p: Plan, chosen: Workload
) -> list[tuple[str, Workload, int, str, tuple[str, ...]]]:
    """The settings of the chosen workload the pilots can speak for: every topology on
    1 Gbit/s, and the map's other settings of that workload. Pure."""
    out = [(f"{chosen.label}-n{n}-1gbit", chosen, n, "1gbit", p.techniques) for n in p.topologies]
    for _key, w, hosts, lan, techniques in p.extra:
        if w is None:
            out.append((f"{chosen.label}-n{hosts}-{lan}", chosen, hosts, lan, techniques))
    return out


def phase_calibrated(
    ctx: Ctx, n: int, b: Bed, pilots: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The chosen workload's settings predicted again from the pilots' measured stages (taken
    on ``n`` laptops), written to ``OUT/regime-calibrated.json`` once, after the pilots and
    before the first measured run (None where a pilot measured no usable figures)."""
    from edgetrain.experiment.report import code_commit

    p = ctx.p
    path = ctx.out / "regime-calibrated.json"
    cores = 1.0 if p.local else LAPTOP.cpu
    w = p.accuracy
    measured = {t: measures_of(s, cores) for t, s in pilots.items()}
    if any(m is None for m in measured.values()) and not path.is_file():
        return None

    def make() -> dict[str, Any]:
        profile = profile_workload(w, b, "laptop-1", ctx.out, ctx.say)  # the regime's, kept
        cals: dict[str, Calibration] = {}
        for t, got in measured.items():
            assert got is not None
            cal = calibration_for(w, t, n, profile, p, got)
            if cal is not None:
                cals[t] = cal
        models = {
            arm: calibrated_model(cals[pilot]) for arm, pilot in PILOT_OF.items() if pilot in cals
        }

        def arm(aw: Workload, technique: str, hosts: int) -> Any:
            return arm_spec(p, aw, technique, hosts)[1]

        settings = predict_map(
            calibrated_settings(p, w), {w.label: profile}, arm, PIPELINES, models
        )
        for key, doc in settings.items():
            speed = (doc.get("speedup") or {}).get("mcpipe")
            if speed is not None:
                ctx.say(f"regime (calibrated on the pilots): {key}: mcPipe {speed:.2f}x Local")
        commit = code_commit()
        return {
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": commit.get("commit"),
            "commit_dirty": commit.get("dirty"),
            "before_measured_runs": not measured_before(ctx.out),
            "calibrated_on": {
                t: {
                    "run": Path(str((pilots.get(t) or {}).get("run"))).name,
                    "cores": cores,
                    **cals[t].as_dict(),
                }
                for t in cals
            },
            "chosen": w.label,
            "rule": "the a priori map's choice; the pilots' stages calibrate the model",
            "settings": settings,
        }

    return dict(kept(path, make))
