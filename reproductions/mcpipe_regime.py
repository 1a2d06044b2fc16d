"""Regime first, for the mcPipe reproduction's accuracy phase: before any measured run, the
pipeline family's cost model (each technique's ``predict`` hook, :mod:`edgetrain.pipeline.predict`)
predicts every arm's time per microbatch on every setting of the map, from each workload's
profile measured on one emulated laptop (``edgetrain profile`` inside the host, so the profile
already runs at the host's CPU share). The prediction is written to ``OUT/regime.json`` once and
never rewritten (a resumed reproduction reads it back), and it chooses the headline workload:
the candidate whose best pipeline is predicted furthest ahead of Local on the largest topology.

Where the model predicts a pipeline ahead of Local (compute-bound stages on separate hosts), the
paper's "Local and data parallelism are behind" should show; where it predicts none (a slow
link between the stages, data parallelism sending the whole gradient each microbatch), it should
not. The claims set each measured setting's direction against its prediction: a map, predicted
and measured, never one chosen setting.

The cost model predicts time per microbatch, not accuracy: a pipeline's time to a target also
pays for its staleness (PipeDream's weight stashing and mcPipe's rebuilt weights train on
versions N - 1 microbatches old at stage 0), which the report shows beside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from edgetrain.experiment.beds import Bed
from edgetrain.experiment.kept import check_covers, kept
from edgetrain.experiment.profiling import profile_argv, profile_in_host
from reproductions.mcpipe_accuracy import arm_spec
from reproductions.mcpipe_plan import PIPELINES, Plan
from reproductions.mcpipe_recipes import RunSpec, Workload, recipe
from reproductions.mcpipe_runs import LAPTOP, Ctx

Say = Callable[[str], None]
ArmSpec = Callable[[Workload, str, int], RunSpec]


def profile_workload(w: Workload, b: Bed, host: str, out: Path, say: Say) -> dict[str, Any]:
    """The workload's profile on ``host`` of the testbed (here for local processes), kept."""
    argv = [
        *profile_argv(w.model, w.dataset, w.microbatch, host, w.options),
        "--kernels",
        "pipeline",
    ]
    path = out / "profiles" / f"{w.label}-{w.dataset}-b{w.microbatch}.json"
    return profile_in_host(b, host, argv, path, say, w.label)


def arm_model(
    w: Workload, r: RunSpec, profile: Mapping[str, Any], hosts: int, lan: str, cpu: float
) -> tuple[Any, Any]:
    """One arm's recipe and the cost model's setting for it: ``hosts`` laptops of ``cpu`` cores
    on ``lan``, the layers from the profile measured on one of them."""
    from edgetrain.emulate.spec import parse_rate
    from edgetrain.recipe import parse_recipe
    from edgetrain.runtime.setting_build import (
        HostFacts,
        TestbedFacts,
        layers_from_profile,
        profile_cores,
        setting_from_testbed,
        sustained_scale,
    )
    from edgetrain.tomlconfig import loads

    rate = parse_rate(lan)
    facts = TestbedFacts(
        "regime", tuple(HostFacts(f"laptop-{k}", cpu, rate) for k in range(1, hosts + 1)), {}
    )
    # the profile's layers as a sustained step of the pipeline's own kernels, at the host's share
    layers = layers_from_profile(profile, w.microbatch, sustained_scale(profile, "pipeline"))
    setting = setting_from_testbed(
        facts,
        layers,
        reference_cpu=profile_cores(profile, cpu),
        workers=r.workers,
        batch=w.microbatch,
    )
    text = recipe(w, r, "regime").replace("{seed}", "1")
    rec = parse_recipe(loads(text), "the arm's recipe")
    return rec, setting


def predict_arm(
    w: Workload,
    r: RunSpec,
    profile: Mapping[str, Any],
    hosts: int,
    lan: str,
    cpu: float,
    model: Callable[[Any, Any], Any] | None = None,
) -> dict[str, Any]:
    """One arm's predicted time per microbatch on ``hosts`` laptops of ``cpu`` cores on ``lan``
    (the profile measured on one of them), with the parts and the model's notes; ``model``
    (recipe, setting) -> prediction in place of the technique's ``predict`` hook (a calibrated
    model)."""
    from edgetrain.runtime.side import launcher_side

    rec, setting = arm_model(w, r, profile, hosts, lan, cpu)
    if model is None:
        pred = launcher_side("pipeline", r.technique).predict(rec, setting)
    else:
        pred = model(rec, setting)
    if pred is None:
        return {"technique": r.technique, "iteration_s": None}
    return {
        "technique": r.technique,
        "iteration_s": pred.iteration_s,
        "samples_per_s": w.microbatch / pred.iteration_s if pred.iteration_s else None,
        "parts": dict(pred.parts),
        "notes": list(pred.notes),
        "memory_bytes": {str(k): v for k, v in pred.memory_bytes.items()},
    }


def speedups(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """Each arm's predicted speed over Local's (Local's time per microbatch over the arm's; > 1:
    ahead of Local per sample). Pure."""
    local = (arms.get("local") or {}).get("iteration_s")
    out: dict[str, float | None] = {}
    for t, a in arms.items():
        mine = a.get("iteration_s")
        out[t] = local / mine if local and mine else None
    return out


def best_pipeline(speed: Mapping[str, float | None], pipelines: Sequence[str]) -> float | None:
    """The predicted speed-up of the fastest pipelined arm (None: none predicted). Pure."""
    got = [v for t, v in speed.items() if t in pipelines and v is not None]
    return max(got) if got else None


def choose(
    predicted: Mapping[str, Mapping[str, Any]], candidates: Sequence[str], hosts: int
) -> str:
    """The headline workload: the candidate whose mcPipe is predicted furthest ahead of Local on
    ``hosts`` laptops (ties: the first). Pure."""

    def score(label: str) -> float:
        got = (predicted.get(f"{label}-n{hosts}-1gbit") or {}).get("speedup") or {}
        v = got.get("mcpipe")
        return float(v) if isinstance(v, (int, float)) else float("-inf")

    return max(candidates, key=lambda c: (score(c), -list(candidates).index(c)))


def predict_map(
    settings: Sequence[tuple[str, Workload, int, str, Sequence[str]]],
    profiles: Mapping[str, Mapping[str, Any]],
    arm: ArmSpec,
    pipelines: Sequence[str],
    models: Mapping[str, Callable[[Any, Any], Any]] | None = None,
) -> dict[str, Any]:
    """Every setting's arms predicted: ``settings`` are (key, workload, hosts, lan,
    techniques), ``profiles`` by workload label; ``models``: a calibrated model per technique
    (:func:`predict_arm`), the techniques it lacks left out. Pure but for the cost model's own
    code."""
    out: dict[str, Any] = {}
    for key, w, hosts, lan, techniques in settings:
        wanted = ("local", *[t for t in techniques if t != "local"])
        arms = {
            t: predict_arm(
                w,
                arm(w, t, hosts),
                profiles[w.label],
                hosts,
                lan,
                LAPTOP.cpu,
                None if models is None else models[t],
            )
            for t in wanted
            if models is None or t in models
        }
        speed = speedups(arms)
        best = best_pipeline(speed, pipelines)
        out[key] = {
            "workload": w.label,
            "hosts": hosts,
            "lan": lan,
            "arms": arms,
            "speedup": speed,
            "best_pipeline_speedup": best,
            "predicts_pipeline_ahead": None if best is None else best > 1.0,
        }
    return out


def regime_document(
    predicted: Mapping[str, Any],
    chosen: str,
    candidates: Sequence[str],
    commit: Mapping[str, Any],
    mode: str,
) -> dict[str, Any]:
    """What ``OUT/regime.json`` holds: when and by which code the prediction was made, the
    chosen headline workload and why, and the map."""
    return {
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit.get("commit"),
        "commit_dirty": commit.get("dirty"),
        "before_measured_runs": True,
        "mode": mode,
        "candidates": list(candidates),
        "chosen": chosen,
        "rule": "the candidate whose mcPipe the cost model predicts furthest ahead of Local "
        "on the largest topology",
        "settings": dict(predicted),
    }


def headline_settings(p: Plan) -> list[tuple[str, Workload, int, str, tuple[str, ...]]]:
    """The map's first part, from which the headline workload is chosen: every candidate on
    every topology's 1 Gbit/s LAN (key, workload, hosts, LAN, techniques)."""
    return [
        (f"{w.label}-n{n}-1gbit", w, n, "1gbit", p.techniques)
        for w in p.headline_candidates
        for n in p.topologies
    ]


def check_kept_regime(p: Plan, out: Path) -> None:
    """Refuse an ``--out`` whose kept ``regime.json`` leaves out a headline setting of this
    plan (another plan wrote it: ``--quick``, say). Reads the file only."""
    keys = (key for key, *_ in headline_settings(p))
    check_covers(out / "regime.json", keys, same={"mode": p.mode})


def phase_regime(ctx: Ctx, b: Bed) -> dict[str, Any]:
    """Profile every workload of the map on one laptop of ``b``, predict every setting, choose
    the headline workload and write ``OUT/regime.json``: once, before the first measured run of
    the accuracy phase (a resumed reproduction reads the same prediction back)."""
    from edgetrain.experiment.report import code_commit

    p = ctx.p

    def arm(w: Workload, technique: str, hosts: int) -> RunSpec:
        return arm_spec(p, w, technique, hosts)[1]

    def make() -> dict[str, Any]:
        workloads = {w.label: w for w in p.headline_candidates}
        workloads |= {w.label: w for _, w, _, _, _ in p.extra if w is not None}
        profiles = {
            label: profile_workload(w, b, "laptop-1", ctx.out, ctx.say)
            for label, w in workloads.items()
        }
        head = headline_settings(p)
        labels = [w.label for w in p.headline_candidates]
        first = predict_map(head, profiles, arm, PIPELINES)
        chosen = choose(first, labels, max(p.topologies))
        chosen_w = workloads[chosen]
        more = []
        for _key, w, hosts, lan, techniques in p.extra:
            w = w or chosen_w
            more.append((f"{w.label}-n{hosts}-{lan}", w, hosts, lan, ("local", *techniques)))
        predicted = {**first, **predict_map(more, profiles, arm, PIPELINES)}
        ctx.say(f"regime: the cost model chose {chosen} (predictions in regime.json)")
        return regime_document(predicted, chosen, labels, code_commit(), p.mode)

    return dict(kept(ctx.out / "regime.json", make))


def chosen_workload(p: Plan, regime: Mapping[str, Any]) -> Workload:
    """The headline workload the prediction chose (the plan's own when it names another)."""
    for w in p.headline_candidates:
        if w.label == regime.get("chosen"):
            return w
    return p.accuracy
