"""R-DC4, DynaComm under a bandwidth trace (rate -> 20 Mbit/s -> rate): re-planned against its
frozen plan, both starting warm from one plan file, on several seeds, interleaved.

Both DynaComm arms start from the same cuts: a plan file made before the first run from a
profile measured inside a trainer host (``edgetrain profile``) and the per-transmission
overhead the pilot measured (``edgetrain plan``), used at the rate of the first phase
(``[ps] plan_bandwidth``). The frozen arm keeps those cuts (``replan = "never"``); the other
re-plans at every epoch barrier. Before the drop the two should be level; while the link is at
20 Mbit/s the re-planned arm should be faster. The phases are sized from the pilot's costs so
that each holds a few epochs, and every epoch is placed in a phase by its own clock (the
trainer's epoch event, seconds since the launch): an epoch that straddles a change is left out.
The sizing and the phase of each epoch are pure; :func:`trace_plan` runs the two commands.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment.beds import Bed
from edgetrain.experiment.claims import median, number, ratio
from edgetrain.experiment.kept import kept
from edgetrain.experiment.profiling import profile_argv
from edgetrain.rundir import atomic_write_json

LOW_MBIT = 20  # the rate of the drop
EPOCH_ITERATIONS = 10  # iterations an epoch holds (per trainer), so that phases hold several
EPOCHS_PER_PHASE = 2  # epochs each phase is sized to hold at the sequential schedule's pace
START_S = 15.0  # launch to the first iteration (workers importing torch at 0.45 core)
MARGIN_S = 3.0  # an epoch this close to a change is not placed in a phase
ARMS = ("replanned", "frozen", "lbl")
Say = Callable[[str], None]


@dataclass(frozen=True)
class Phases:
    """The trace: ``rate`` Mbit/s until ``drop_at`` s, :data:`LOW_MBIT` until ``back_at``, then
    ``rate`` again; ``epochs`` per run, enough to reach past ``back_at`` even at twice the
    sequential schedule's pace."""

    rate: int
    drop_at: float
    back_at: float
    epochs: int
    low: int = LOW_MBIT

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def phases_for(rate: int, compute_s: float | None, communication_s: float | None) -> Phases:
    """The phases from the pilot's per-iteration compute and communication at ``rate`` (the
    sequential schedule's, an upper bound on DynaComm's): each phase holds
    :data:`EPOCHS_PER_PHASE` epochs of :data:`EPOCH_ITERATIONS`; without costs, 60 s each.
    Pure."""
    c, m = number(compute_s), number(communication_s)
    if c is None or m is None:
        return Phases(rate, 60.0, 120.0, 2 * (2 * EPOCHS_PER_PHASE + 1) + EPOCHS_PER_PHASE + 1)
    per_phase = EPOCHS_PER_PHASE * EPOCH_ITERATIONS
    high = c + m
    low = c + m * rate / LOW_MBIT
    # the first epoch holds the start probe and is left out: the first phase holds one more
    drop_at = round(START_S + (per_phase + EPOCH_ITERATIONS) * high, 1)
    back_at = round(drop_at + per_phase * low, 1)
    # at up to twice the pace the run must still reach past the drop and into the return
    epochs = 2 * (2 * EPOCHS_PER_PHASE + 1) + EPOCHS_PER_PHASE + 1
    return Phases(rate, drop_at, back_at, epochs)


def trace_changes(ph: Phases, trainers: int) -> list[dict[str, Any]]:
    """The trace's changes of every trainer's access link. Pure."""
    return [
        {"at": at, "link": f"trainer-{i}", "rate": f"{rate}mbit"}
        for at, rate in ((0, ph.rate), (ph.drop_at, ph.low), (ph.back_at, ph.rate))
        for i in range(1, trainers + 1)
    ]


def phase_of(row: Mapping[str, Any], ph: Phases) -> str | None:
    """The phase an epoch ran in (``before``, ``drop``, ``after``) from its event's clock ``t``
    (its end, evaluation included), ``epoch_s`` and ``eval_s``; None when it straddles a change
    (within :data:`MARGIN_S`) or has no clock. Pure."""
    t, train, ev = number(row.get("t")), number(row.get("epoch_s")), number(row.get("eval_s"))
    if t is None or train is None:
        return None
    end = t - (ev or 0.0)
    start = end - train
    if end <= ph.drop_at - MARGIN_S:
        return "before"
    if start >= ph.drop_at + MARGIN_S and end <= ph.back_at - MARGIN_S:
        return "drop"
    if start >= ph.back_at + MARGIN_S:
        return "after"
    return None


def by_phase(per_epoch: Sequence[Mapping[str, Any]], ph: Phases) -> dict[str, float | None]:
    """The median iteration time of every trainer's epochs in each phase (the first epoch left
    out: it holds the start probe). Pure."""
    got: dict[str, list[Any]] = {"before": [], "drop": [], "after": []}
    for r in per_epoch:
        phase = phase_of(r, ph)
        if phase is not None and (r.get("epoch") or 0) > 1:
            got[phase].append(r.get("iteration_s"))
    return {k: median(v) for k, v in got.items()}


def phase_ratios(seeds: Mapping[str, Mapping[str, Any]], phase: str) -> dict[str, float | None]:
    """Per seed: the frozen arm's iteration time in ``phase`` over the re-planned arm's (> 1:
    re-planning is faster). Pure."""
    out: dict[str, float | None] = {}
    for seed, arms in seeds.items():
        frozen = (arms.get("frozen") or {}).get("phases") or {}
        replanned = (arms.get("replanned") or {}).get("phases") or {}
        out[seed] = ratio(frozen.get(phase), replanned.get(phase))
    return out


def plan_argv(profile: Path, rate: int, dt_s: float | None, run_dir: Path) -> list[str]:
    """``edgetrain plan`` of the profile at ``rate`` and the drop's rate, as JSON."""
    args = [sys.executable, "-m", "edgetrain", "plan", "--profile", str(profile)]
    args += ["--bandwidth", f"{rate}mbit,{LOW_MBIT}mbit"]
    args += ["--dt", f"{dt_s:.6f}"] if dt_s else ["--rtt", "1ms"]
    return args + ["--run-dir", str(run_dir), "--name", "trace", "--format", "json"]


def _run(argv: Sequence[str], what: str) -> dict[str, Any]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        tail = ((proc.stdout + proc.stderr).strip().splitlines() or ["(no output)"])[-1]
        raise EdgetrainError(f"{what} failed: {tail}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def trace_plan(
    out: Path, key: str, model: str, batch: int, rate: int, dt_s: float | None, b: Bed, say: Say
) -> tuple[Path, dict[str, Any]]:
    """The plan file both DynaComm arms start from, made once before the trace's first run (a
    resumed reproduction reads it back): the profile measured on ``trainer-1`` of ``b`` (here,
    for local processes), planned at ``rate`` with the pilot's ``dt_s``. Its path (absolute:
    ``[ps] plan`` takes it as it is) and the record of how it was made."""
    where = out / "trace-plan" / key

    def make() -> dict[str, Any]:
        say(f"R-DC4: profiling {model} on trainer-1 and planning at {rate} Mbit/s")
        if where.exists():
            shutil.rmtree(where)
        where.mkdir(parents=True)
        profile = _run(
            b.command("trainer-1", profile_argv(model, "mnist", batch, "trainer-1")), "profile"
        )
        atomic_write_json(where / "profile.json", profile)
        plan = _run(plan_argv(where / "profile.json", rate, dt_s, where), "plan")
        entry = (plan.get("bandwidths") or [{}])[0].get("strategies", {}).get("dynacomm", {})
        return {
            "model": model,
            "batch": batch,
            "rate_mbit": rate,
            "dt_s": dt_s,
            "profile_host": "trainer-1",
            "dynacomm_at_rate": entry,
            "plan": plan,
        }

    doc = dict(kept(out / "trace-plan" / f"{key}.json", make))
    path = (where / "plans" / "trace.json").resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, doc["plan"])
    return path, {k: v for k, v in doc.items() if k != "plan"}


def arm_plan_keys(plan: Path, rate: int) -> dict[str, Any]:
    """The ``[ps]`` keys that start an arm from the plan file's entry at ``rate``."""
    return {"plan": str(plan), "plan_bandwidth": f"{rate}mbit"}


def data_iterations(test_split: float) -> int:
    """The ``iterations`` to ask :func:`~reproductions.dynacomm_plan.data` for, so that each
    trainer's epoch holds at least :data:`EPOCH_ITERATIONS` (it adds two, then the test split
    is taken out). Pure."""
    return max(1, math.ceil(EPOCH_ITERATIONS / (1 - test_split)) - 2)
