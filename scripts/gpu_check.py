"""The GPU check: the claims that only a GPU can test, in at most 5 minutes on a lent GPU machine.

Run once per session lent a GPU (an H100/H200 with 16 cores and no internet); on a machine
without CUDA it prints one line and exits 0, and ``--device cpu`` runs the same logic on the
CPU (thresholds and the shape of the output can be tried anywhere). Every run is a real
``edgetrain launch`` of a shipped recipe with ``--set`` overrides (digits or synthetic data,
nothing downloaded), each with a timeout (``--timeout``); on CUDA no run starts once
``--budget`` seconds (295) have passed. The training and memory checks launch ``--parallel``
runs at a time (4 on a 16-core CUDA machine), the PS control's timed runs one at a time. Four
checks:

1. ``training``: every family trains on the device: GoSGD and DLion (gossip), DynaComm and
   Mercury (parameter server), and the five pipeline techniques (Local, data parallelism,
   PipeDream, GreedyUpdates, mcPipe, and mcPipe with ``replay = "lowrank"``; these with
   ``deterministic = true``, so that they also serve check 2), 2 epochs each; each must
   complete above its accuracy floor.
2. ``determinism`` (issues 28 and 29): with ``[train] deterministic = true``, mcPipe's weights
   equal PipeDream's (check 1's runs), and check 4's runs give one ``model_sha256``: the two
   DynaComm runs alike, and the four schedules alike.
3. ``memory``: an FC-heavy MLP (digits, hidden 2048 x 4, no momentum) as 2 stages with window
   4, chunked replay (1 MiB chunks) and cuBLAS's small workspace (``[train] blas_workspace``),
   PipeDream against mcPipe: stage 0's accelerator memory (``max_memory_allocated`` since
   training began; on the CPU the store's resident bytes) as the ratio PipeDream/mcPipe; the
   issue's goal is at least 2.5x.
4. ``ps`` (issue 28's positive control): one trainer computing on the device against a server on
   the CPU (``hold_ms = 0``: the real loopback link), ``cnn2`` (width 64) on synthetic 1x32x32
   images with the batch calibrated so that compute meets communication; the four schedules, all
   deterministic: DynaComm first and last, the three others once between. Per schedule the last
   epoch's median iteration time; DynaComm's cut against sequential as a share of the overlap
   ceiling min(compute, communication) / (compute + communication), from the sequential runs'
   own buckets. Best effort: it passes when DynaComm is at most 3% slower than sequential (issue
   28's goal, a cut of at least 0.8 of the ceiling, is reported beside it).

The summary goes to stdout (each check PASS or FAIL with its figures, then a table with the
time of each check and the total), every figure to ``--out`` as JSON, one line per run to
stderr. Exit status 1 when a check failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHECKS = ("training", "determinism", "memory", "ps")
TITLES = {
    "training": "every family trains",
    "determinism": "same weights (deterministic)",
    "memory": "pipeline stage-0 memory",
    "ps": "PS positive control",
}
SKIPPED_LINE = "gpu-check: no CUDA device here: skipped"
DEFAULT_OUT = "gpu-check.json"
DEFAULT_TIMEOUT_S = 90
# With --device cuda the check stops starting runs after this many seconds (the lent machine's
# time is scarce: the check is meant to take at most 5 minutes there); unlimited on the CPU.
DEFAULT_BUDGET_S = 295

# Check 1: (label, recipe, overrides, accuracy floor). Two epochs on digits reached on the CPU
# (scripts/gpu-check --device cpu): GoSGD 0.87, DLion 0.64, DynaComm 0.62, Mercury 0.99, Local
# 0.92, data parallelism 0.92, PipeDream 0.86, GreedyUpdates 0.78, mcPipe 0.86; each floor
# leaves at least 0.2 of margin below that and stays well above chance (0.1).
PIPELINE_RECIPE = "recipes/mcpipe.toml"
TRAINING: tuple[tuple[str, str, dict[str, Any], float], ...] = (
    ("gosgd", "recipes/quickstart.toml", {}, 0.5),
    ("dlion", "recipes/dlion.toml", {}, 0.4),
    ("dynacomm", "recipes/dynacomm.toml", {}, 0.4),
    ("mercury", "recipes/mercury.toml", {}, 0.5),
    ("local", PIPELINE_RECIPE, {"train.technique": "local", "workers.1.count": 1}, 0.5),
    (
        "dataparallel",
        PIPELINE_RECIPE,
        {"train.technique": "dataparallel", "workers.1.role": "replica", "workers.1.count": 2},
        0.5,
    ),
    ("pipedream", PIPELINE_RECIPE, {"train.technique": "pipedream"}, 0.5),
    ("greedy", PIPELINE_RECIPE, {"train.technique": "greedy"}, 0.5),
    ("mcpipe", PIPELINE_RECIPE, {"train.technique": "mcpipe"}, 0.5),
    # mcPipe's low-rank replay (plain SGD; close to PipeDream, not bitwise: no determinism claim)
    (
        "mcpipe-lowrank",
        PIPELINE_RECIPE,
        {"train.technique": "mcpipe", "pipeline.replay": "lowrank", "train.momentum": 0.0},
        0.5,
    ),
)
TRAINING_EPOCHS = 2

# Check 3: the FC-heavy MLP of issue 29 (the reproduction's memory runs train without momentum).
MEMORY_SETS: dict[str, Any] = {
    "model.options.hidden": [2048, 2048, 2048, 2048],
    "workers.1.count": 2,
    "pipeline.window": 4,
    "pipeline.objective": "params",
    "pipeline.microbatches": 24,
    "train.epochs": 1,
    "train.momentum": 0.0,
    # the paper's setting: chunked replay (1 MiB of weights per chunk, every schedule alike),
    # so mcPipe's transient is a chunk, not a unit's weights; and cuBLAS's small workspace (the
    # default keeps 32 MiB per thread on Hopper, two threads: more than this stage's weights)
    "pipeline.chunk_mib": 1.0,
    "train.blas_workspace": "small",
}
MEMORY_GOAL = 2.5

# Check 4: the positive control's model, data and schedules.
SCHEDULES = ("sequential", "lbl", "ibatch", "dynacomm")
# The runs in order: DynaComm first and last (its two runs bracket any drift of the machine, and
# must give one model), the three others once between. Each run's figure is the median
# iteration of its measured epoch; a start-up costs about 19 s on a lent H200, so two runs of
# every schedule do not fit the budget beside the other checks.
PS_ORDER = ("dynacomm-1", "sequential-1", "lbl-1", "ibatch-1", "dynacomm-2")
PS_MODEL = "cnn2"
PS_OPTIONS: dict[str, Any] = {"width": 64}
PS_SHAPE = (1, 32, 32)
PS_CLASSES = 10
PS_EPOCHS = 2  # epoch 1: cold start and the first plan; epoch 2 is measured
PS_ITERATIONS = 12  # per epoch
PS_TEST_SPLIT = 0.2  # the recipe's default held-out share
PS_BATCHES = (32, 64, 128, 256, 512, 1024, 2048, 4096)
# The loopback rate a trainer pulled at from a CPU server on the 16-core GPU machine (issue 28:
# 1.0-1.7 GB/s): the calibration's estimate of communication (pull + push of every parameter).
PS_LINK_BPS = 1.5e9
PS_SLACK = 0.03  # DynaComm may be this much slower than sequential and pass
PS_CEILING_GOAL = 0.8  # issue 28's goal: a cut of at least this share of the ceiling


# ---------------------------------------------------------------- pure parts


@dataclass
class CheckResult:
    """One check's verdict: PASS, FAIL or SKIP (not selected), its figures and the lines that
    say them, and how long it took."""

    name: str
    status: str
    headline: str
    lines: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0


def overlap_ceiling(compute_s: float, comm_s: float) -> float:
    """The share of an iteration that overlapping compute and communication can save at most:
    min(C, M) / (C + M) (0 when both are 0)."""
    if compute_s < 0 or comm_s < 0:
        raise ValueError("compute and communication times must not be negative")
    total = compute_s + comm_s
    return min(compute_s, comm_s) / total if total > 0 else 0.0


def cut(base_s: float, other_s: float) -> float:
    """The share of ``base_s`` that ``other_s`` saves (negative: slower)."""
    if base_s <= 0:
        raise ValueError("the base time must be positive")
    return 1.0 - other_s / base_s


def ceiling_within(compute_s: float, iteration_s: float) -> float:
    """The overlap ceiling of a sequential iteration of ``iteration_s`` that computes for
    ``compute_s``: the rest of it is taken as communication."""
    return overlap_ceiling(compute_s, max(iteration_s - compute_s, 0.0))


def share_of_ceiling(saved: float, ceiling: float) -> float | None:
    """A cut as a share of the ceiling (None when the ceiling is 0: nothing to reach)."""
    return saved / ceiling if ceiling > 0 else None


def parts_from_rows(rows: Sequence[Mapping[str, Any]]) -> tuple[float, float, str] | None:
    """Compute and communication seconds per iteration, and where they came from, from
    sequential runs' last epoch rows (medians over the rows): the measured buckets (compute =
    compute only + both, communication = communication only + both) where every row has them,
    else the live cost model's verdict (``costs``); None when neither is there."""
    if not rows:
        return None
    if all(r.get("buckets") for r in rows):
        c = [r["buckets"]["compute_only"] + r["buckets"]["both"] for r in rows]
        m = [r["buckets"]["comm_only"] + r["buckets"]["both"] for r in rows]
        return statistics.median(c), statistics.median(m), "measured buckets"
    if all(isinstance(r.get("costs"), dict) for r in rows):
        c = [r["costs"]["compute_s"] for r in rows]
        m = [r["costs"]["communication_s"] for r in rows]
        return statistics.median(c), statistics.median(m), "live cost model"
    return None


def pick_batch(compute_s: Mapping[int, float], comm_s: float) -> int:
    """The smallest batch whose compute takes at least ``comm_s`` (compute then meets
    communication), else the largest one measured."""
    if not compute_s:
        raise ValueError("no batch was timed")
    for batch in sorted(compute_s):
        if compute_s[batch] >= comm_s:
            return batch
    return max(compute_s)


def ps_sample_count(batch: int, iterations: int = PS_ITERATIONS) -> int:
    """Synthetic samples for ``iterations`` training batches per epoch after the test split."""
    return math.ceil(batch * iterations / (1.0 - PS_TEST_SPLIT))


def all_equal(values: Sequence[str | None]) -> bool:
    """Every value present and the same (an empty list is not agreement)."""
    return bool(values) and None not in values and len(set(values)) == 1


def exit_code(results: Sequence[CheckResult]) -> int:
    """1 when any check failed, else 0 (a skipped check fails nothing)."""
    return 1 if any(r.status == "FAIL" for r in results) else 0


def table(results: Sequence[CheckResult], total_s: float) -> str:
    """The closing table: one row per check with its result, time and headline, and a total."""
    rows = [
        (f"{CHECKS.index(r.name) + 1} {TITLES[r.name]}", r.status, _secs(r.elapsed_s), r.headline)
        for r in sorted(results, key=lambda r: CHECKS.index(r.name))
    ]
    w0 = max([len("check"), *(len(r[0]) for r in rows)])
    w2 = max([len("time"), *(len(r[2]) for r in rows)])
    out = [f"{'check':<{w0}}  result  {'time':>{w2}}  figures"]
    out += [f"{a:<{w0}}  {b:<6}  {c:>{w2}}  {d}" for a, b, c, d in rows]
    counts = {s: sum(r.status == s for r in results) for s in ("PASS", "FAIL", "SKIP")}
    tail = f"total {_secs(total_s)}: {counts['PASS']} PASS, {counts['FAIL']} FAIL"
    if counts["SKIP"]:
        tail += f", {counts['SKIP']} not run"
    return "\n".join([*out, tail])


def toml_value(value: Any) -> str:
    """``value`` as a TOML value for ``--set`` (bool, number, string or a list of them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for the plain text used here
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML spelling for {type(value).__name__}")


def _secs(s: float) -> str:
    return f"{s:.1f} s" if s > 0 else "-"


def _ms(s: float | None) -> str:
    return f"{s * 1e3:.2f} ms" if s is not None else "-"


def _pct(x: float | None) -> str:
    return f"{x:.1%}" if x is not None else "-"


# ---------------------------------------------------------------- runs


@dataclass
class Run:
    """One launch: its run directory, whether it completed, its summary, and why not."""

    label: str
    run_dir: Path
    completed: bool
    seconds: float
    summary: dict[str, Any]
    error: str | None = None

    @property
    def accuracy(self) -> float | None:
        acc = self.summary.get("test_accuracy")
        return float(acc) if isinstance(acc, (int, float)) else None

    @property
    def sha(self) -> str | None:
        sha = self.summary.get("model_sha256")
        return str(sha) if self.completed and sha else None

    def brief(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "completed": self.completed,
            "seconds": round(self.seconds, 2),
            "test_accuracy": self.accuracy,
            "model_sha256": self.sha,
            "error": self.error,
        }


@dataclass
class Context:
    """Where runs go, on which device, for how long each, and the log they report to."""

    root: Path
    device: str
    timeout_s: int
    log: Callable[[str], None]
    deadline: float | None = None  # time.monotonic() after which no run starts
    # launches at a time where a check's figures do not depend on timing (training, memory);
    # the PS control's runs are timed, so always one at a time
    parallel: int = 1

    def run_timeout(self) -> float | None:
        """The next run's timeout: the per-run one, cut to what the budget has left (None:
        the budget is spent)."""
        if self.deadline is None:
            return float(self.timeout_s)
        left = self.deadline - time.monotonic()
        return min(float(self.timeout_s), left) if left > 0 else None


def _stop(proc: subprocess.Popen[str]) -> None:
    """Stop a launch that ran past its timeout: SIGTERM to its process group (the launcher
    stops its workers and marks the run interrupted), then SIGKILL if it lingers."""
    for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _last_lines(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])[-400:]


def launch(ctx: Context, label: str, recipe: str, sets: Mapping[str, Any]) -> Run:
    """``edgetrain launch RECIPE --set ...`` into ``ROOT/label`` on the check's device, with a
    timeout; the run's summary (``report/summary.json``)."""
    run_dir = ctx.root / label
    timeout = ctx.run_timeout()
    if timeout is None:
        ctx.log(f"  run {label}: not started (the --budget is spent)")
        return Run(label, run_dir, False, 0.0, {}, "not started: the --budget was spent")
    argv = [
        sys.executable, "-m", "edgetrain", "launch", str(REPO / recipe),
        "--run-dir", str(run_dir), "--format", "json",
    ]  # fmt: skip
    for key, value in {**sets, "train.device": ctx.device}.items():
        argv += ["--set", f"{key}={toml_value(value)}"]
    # the repository first, then whatever the caller put on the path (a lent machine's carried
    # wheels live there)
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
        start_new_session=True,
    )  # fmt: skip
    error: str | None = None
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc)
        proc.communicate()
        err = ""
        error = f"timed out after {timeout:.0f} s"
    seconds = time.monotonic() - t0
    summary: dict[str, Any] = {}
    path = run_dir / "report" / "summary.json"
    if path.is_file():
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            summary = {}
    completed = error is None and proc.returncode == 0 and summary.get("status") == "completed"
    if not completed and error is None:
        error = str(summary.get("error") or "") or _last_lines(err) or f"exit {proc.returncode}"
    run = Run(label, run_dir, completed, seconds, summary, error)
    acc = f"accuracy {run.accuracy:.3f}" if run.accuracy is not None else "no accuracy"
    state = "completed" if completed else f"FAILED ({error})"
    ctx.log(f"  run {label}: {state}, {acc}, {seconds:.1f} s")
    return run


def epoch_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The trainers' epoch rows that carry an iteration time (the PS family's), in order."""
    rows: list[dict[str, Any]] = []
    for f in sorted((run_dir / "metrics").glob("worker-*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("event") == "epoch" and row.get("iteration_s") is not None:
                rows.append(row)
    return rows


def last_epoch_row(run: Run) -> dict[str, Any] | None:
    rows = epoch_rows(run.run_dir) if run.completed else []
    return max(rows, key=lambda r: int(r.get("epoch", 0))) if rows else None


def stage0_memory(run: Run) -> dict[str, Any]:
    """Stage 0's ``metrics/pipeline-memory-stage0.json`` (empty when it is not there)."""
    path = run.run_dir / "metrics" / "pipeline-memory-stage0.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


# ---------------------------------------------------------------- the checks


def launch_all(ctx: Context, jobs: Sequence[tuple[str, str, Mapping[str, Any]]]) -> list[Run]:
    """:func:`launch` each (label, recipe, sets), ``ctx.parallel`` at a time (each launch is
    its own process group on its own ports), the runs in the jobs' order."""
    if ctx.parallel <= 1 or len(jobs) <= 1:
        return [launch(ctx, *job) for job in jobs]
    with ThreadPoolExecutor(max_workers=ctx.parallel) as pool:
        return list(pool.map(lambda job: launch(ctx, *job), jobs))


def default_parallel(device: str, cores: int | None) -> int:
    """Launches at a time for the untimed checks: on CUDA one per 4 cores, at most 4 (a lent
    machine's 16 cores: 4; a launch's start-up, mostly importing torch, took 13-27 s there,
    and 16 launches one at a time did not fit the budget); on the CPU one. Pure."""
    if device != "cuda":
        return 1
    return max(1, min(4, (cores or 1) // 4))


def check_training(ctx: Context) -> tuple[CheckResult, dict[str, Run]]:
    runs: dict[str, Run] = {}
    failed: list[str] = []
    figures: dict[str, Any] = {}
    jobs: list[tuple[str, str, Mapping[str, Any]]] = []
    for label, recipe, sets, _floor in TRAINING:
        extra: dict[str, Any] = {"train.epochs": TRAINING_EPOCHS}
        if recipe == PIPELINE_RECIPE:
            extra["train.deterministic"] = True
        jobs.append((f"train-{label}", recipe, {**sets, **extra}))
    for (label, _recipe, _sets, floor), run in zip(TRAINING, launch_all(ctx, jobs), strict=True):
        runs[label] = run
        ok = run.completed and run.accuracy is not None and run.accuracy > floor
        figures[label] = {**run.brief(), "floor": floor, "passed": ok}
        if not ok:
            failed.append(label)
    accs = ", ".join(
        f"{k} {r.accuracy:.2f}" if r.accuracy is not None else f"{k} -" for k, r in runs.items()
    )
    lines = [f"accuracy after {TRAINING_EPOCHS} epochs: {accs}"]
    for k in failed:
        r = runs[k]
        why = (
            r.error if not r.completed else f"accuracy {r.accuracy} not above {figures[k]['floor']}"
        )
        lines.append(f"{k}: {why}")
    done = [r.accuracy for r in runs.values() if r.accuracy is not None]
    low = min(runs.items(), key=lambda kv: kv[1].accuracy if kv[1].accuracy is not None else -1)
    headline = f"{len(runs) - len(failed)}/{len(runs)} trained"
    if done:
        headline += f"; lowest accuracy {low[1].accuracy or 0:.2f} ({low[0]})"
    if failed:
        headline += f"; failed: {', '.join(failed)}"
    status = "FAIL" if failed else "PASS"
    return CheckResult("training", status, headline, lines, figures), runs


def check_determinism(
    training: Mapping[str, Run] | None, ps: Mapping[str, Run] | None
) -> CheckResult:
    claims: dict[str, bool] = {}
    lines: list[str] = []
    figures: dict[str, Any] = {}
    if training is not None:
        pd, mc = training.get("pipedream"), training.get("mcpipe")
        shas = [pd.sha if pd else None, mc.sha if mc else None]
        claims["mcpipe = pipedream"] = all_equal(shas)
        figures["pipeline"] = {"pipedream": shas[0], "mcpipe": shas[1]}
        lines.append(f"mcPipe vs PipeDream: {_shas(shas)}")
    if ps is not None:
        dyn = [ps[k].sha for k in sorted(ps) if k.startswith("dynacomm")]
        every = {k: ps[k].sha for k in sorted(ps)}
        claims["dynacomm twice"] = len(dyn) >= 2 and all_equal(dyn)
        claims["four schedules"] = all_equal(list(every.values()))
        figures["ps"] = every
        lines.append(f"DynaComm run twice: {_shas(dyn)}")
        lines.append(f"the four schedules, {len(every)} runs: {_shas(list(every.values()))}")
    figures["claims"] = claims
    if not claims:
        return CheckResult("determinism", "SKIP", "needs the training and ps checks' runs")
    broken = [k for k, v in claims.items() if not v]
    status = "FAIL" if broken else "PASS"
    headline = ("differ: " + ", ".join(broken)) if broken else "equal: " + ", ".join(claims)
    return CheckResult("determinism", status, headline, lines, figures)


def _shas(shas: Sequence[str | None]) -> str:
    if not shas:
        return "no runs"
    if all_equal(shas):
        return f"all {len(shas)} equal ({str(shas[0])[:12]})"
    return "DIFFER: " + ", ".join(str(s)[:12] if s else "none" for s in shas)


def check_memory(ctx: Context) -> CheckResult:
    key = "accelerator_allocated_peak_bytes" if ctx.device == "cuda" else "resident_bytes"
    what = "accelerator allocated peak" if ctx.device == "cuda" else "resident (store's figure)"
    figures: dict[str, Any] = {"key": key, "settings": MEMORY_SETS}
    mem: dict[str, dict[str, Any]] = {}
    runs: dict[str, Run] = {}
    techniques = ("pipedream", "mcpipe")
    jobs = [
        (f"memory-{t}", PIPELINE_RECIPE, {**MEMORY_SETS, "train.technique": t}) for t in techniques
    ]
    for technique, run in zip(techniques, launch_all(ctx, jobs), strict=True):
        runs[technique] = run
        doc = stage0_memory(run) if run.completed else {}
        mem[technique] = doc.get("memory") or {}
        figures[technique] = {**run.brief(), "device": doc.get("device"), "memory": mem[technique]}
    bad = [t for t, r in runs.items() if not r.completed]
    if bad:
        why = "; ".join(f"{t}: {runs[t].error}" for t in bad)
        return CheckResult("memory", "FAIL", f"run failed: {why}", [why], figures)
    pd, mc = mem["pipedream"].get(key), mem["mcpipe"].get(key)
    if not isinstance(pd, int) or not isinstance(mc, int) or mc <= 0:
        why = f"stage 0 has no {key} figure (pipeline-memory-stage0.json)"
        return CheckResult("memory", "FAIL", why, [why], figures)
    ratio = pd / mc
    figures["ratio"] = ratio
    lines = [
        f"stage 0 {what}: PipeDream {pd / 2**20:.1f} MiB, mcPipe {mc / 2**20:.1f} MiB, "
        f"ratio {ratio:.2f}x (goal >= {MEMORY_GOAL}x)"
    ]
    rp, rm = mem["pipedream"].get("resident_bytes"), mem["mcpipe"].get("resident_bytes")
    if key != "resident_bytes" and isinstance(rp, int) and isinstance(rm, int) and rm > 0:
        figures["resident_ratio"] = rp / rm
        lines.append(f"resident (store's figure): {rp / rm:.2f}x")
    tp, tm = mem["pipedream"].get("transient_peak_bytes"), mem["mcpipe"].get("transient_peak_bytes")
    if isinstance(tp, int) and isinstance(tm, int) and tm > 0:
        figures["transient_ratio"] = tp / tm
        lines.append(f"transient peak (store's figure): {tp / tm:.2f}x")
    ap, am = (
        mem["pipedream"].get("accelerator_allocated_bytes"),
        mem["mcpipe"].get("accelerator_allocated_bytes"),
    )
    if isinstance(ap, int) and isinstance(am, int):
        lines.append(
            f"allocated at the end (weights, cuBLAS's workspaces): PipeDream {ap / 2**20:.1f} "
            f"MiB, mcPipe {am / 2**20:.1f} MiB"
        )
    status = "PASS" if ratio >= MEMORY_GOAL else "FAIL"
    headline = f"stage 0 PipeDream/mcPipe {ratio:.2f}x ({what}; goal {MEMORY_GOAL}x)"
    return CheckResult("memory", status, headline, lines, figures)


def calibrate(device: str, fixed: int | None = None) -> tuple[dict[int, float], float]:
    """Seconds of one forward and backward pass of the positive control's model per batch
    size (deterministic kernels, as the runs use; on CUDA synchronised, so the GPU's own
    time), up to the first that takes at least the estimated communication (or of the
    ``fixed`` batch alone); and that estimate (pull + push of every parameter at
    :data:`PS_LINK_BPS`)."""
    import torch

    from edgetrain.models.zoo import build_model
    from edgetrain.runtime import determinism

    determinism.apply(True)
    if device == "cpu":
        torch.set_num_threads(1)  # a worker's default: one thread
    dev = torch.device(device)
    torch.manual_seed(0)
    model = build_model(PS_MODEL, PS_SHAPE, PS_CLASSES, PS_OPTIONS).to(dev)
    comm = 2 * sum(p.numel() * p.element_size() for p in model.parameters()) / PS_LINK_BPS
    times: dict[int, float] = {}
    for batch in (fixed,) if fixed else PS_BATCHES:
        x = torch.randn(batch, *PS_SHAPE, device=dev)
        y = torch.randint(0, PS_CLASSES, (batch,), device=dev)
        samples = []
        for i in range(5):
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            if i > 0:  # the first is a warm-up
                samples.append(time.perf_counter() - t0)
        times[batch] = statistics.median(samples)
        if times[batch] >= comm:
            break
    return times, comm


def check_ps(ctx: Context, batch: int | None) -> tuple[CheckResult, dict[str, Run]]:
    figures: dict[str, Any] = {
        "model": f"{PS_MODEL} {PS_OPTIONS}",
        "input": list(PS_SHAPE),
        "link_estimate_Bps": PS_LINK_BPS,
    }
    times, comm = calibrate(ctx.device, batch)
    batch = batch or pick_batch(times, comm)
    figures["calibration"] = {
        "compute_s_by_batch": {str(b): t for b, t in times.items()},
        "communication_estimate_s": comm,
    }
    ctx.log(
        f"  calibration: communication ~{_ms(comm)}; compute "
        + ", ".join(f"{b}: {_ms(t)}" for b, t in times.items())
        + f"; batch {batch}"
    )
    figures["batch"] = batch
    sets: dict[str, Any] = {
        "data.dataset": "synthetic",
        "data.shape": list(PS_SHAPE),
        "data.classes": PS_CLASSES,
        "data.count": ps_sample_count(batch),
        "model.name": PS_MODEL,
        **{f"model.options.{k}": v for k, v in PS_OPTIONS.items()},
        "train.batch_size": batch,
        "train.epochs": PS_EPOCHS,
        "train.deterministic": True,
        "ps.hold_ms": 0.0,
        "workers.2.count": 1,
    }
    runs: dict[str, Run] = {}
    for key in PS_ORDER:
        runs[key] = launch(
            ctx, f"ps-{key}", "recipes/dynacomm.toml",
            {**sets, "train.technique": key.rsplit("-", 1)[0]},
        )  # fmt: skip
    rows = {k: last_epoch_row(r) for k, r in runs.items()}
    figures["runs"] = {k: {**r.brief(), "last_epoch": _row_brief(rows[k])} for k, r in runs.items()}
    per: dict[str, list[float]] = {s: [] for s in SCHEDULES}
    for k, row in rows.items():
        if row is not None:
            per[k.rsplit("-", 1)[0]].append(float(row["iteration_s"]))
    missing = [k for k, row in rows.items() if row is None]
    if missing:
        why = "; ".join(f"{k}: {runs[k].error or 'no epoch rows'}" for k in missing)
        return CheckResult("ps", "FAIL", f"runs failed: {', '.join(missing)}", [why], figures), runs
    med = {s: statistics.median(v) for s, v in per.items()}
    figures["iteration_s"] = {s: {"median": med[s], "runs": per[s]} for s in SCHEDULES}
    seq, dyn = med["sequential"], med["dynacomm"]
    saved = cut(seq, dyn)
    parts = parts_from_rows([rows[k] or {} for k in rows if k.startswith("sequential")])
    lines = [
        "iteration (median over each schedule's runs): "
        + ", ".join(f"{s} {_ms(med[s])}" for s in SCHEDULES)
        + f" (batch {batch})"
    ]
    share: float | None = None
    if parts is not None:
        compute, comm, source = parts
        ceiling = overlap_ceiling(compute, comm)
        share = share_of_ceiling(saved, ceiling)
        figures.update(
            compute_s=compute, communication_s=comm, parts_source=source, ceiling=ceiling
        )
        lines.append(
            f"sequential's parts ({source}): compute {_ms(compute)}, communication {_ms(comm)}; "
            f"overlap ceiling {_pct(ceiling)}"
        )
    calibrated = times[batch]
    figures["calibrated_ceiling"] = ceiling_within(calibrated, seq)
    lines.append(
        f"compute timed apart (synchronised): {_ms(calibrated)} of sequential's {_ms(seq)}: "
        f"ceiling {_pct(figures['calibrated_ceiling'])}"
    )
    best_other = min(med["lbl"], med["ibatch"])
    figures.update(cut=saved, share_of_ceiling=share, behind_best_other=dyn / best_other - 1)
    share_text = f"{share:.2f} of the ceiling" if share is not None else "no ceiling"
    lines.append(
        f"DynaComm against sequential: cut {_pct(saved)} ({share_text}; issue 28's goal "
        f"{PS_CEILING_GOAL}); against the best of LBL and iBatch {_pct(dyn / best_other - 1)}"
    )
    status = "PASS" if dyn <= seq * (1 + PS_SLACK) else "FAIL"
    headline = f"DynaComm {_ms(dyn)} vs sequential {_ms(seq)}: cut {_pct(saved)}, {share_text}"
    return CheckResult("ps", status, headline, lines, figures), runs


def _row_brief(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    keys = ("epoch", "iteration_s", "forward_s", "backward_s", "buckets", "costs",
            "hidden_share", "forward_cuts", "backward_cuts", "link_source")  # fmt: skip
    return {k: row.get(k) for k in keys}


# ---------------------------------------------------------------- main


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"gpu-check: {message}; see scripts/gpu-check --help", file=sys.stderr)
        raise SystemExit(2)


def _only(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [n for n in names if n not in CHECKS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown check {', '.join(bad) or repr(text)}: use some of {', '.join(CHECKS)}"
        )
    return names


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return n


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = _Parser(prog="scripts/gpu-check", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"JSON file (default {DEFAULT_OUT})")
    ap.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda",
        help="where the runs compute (default cuda; cpu tries the whole check anywhere)",
    )  # fmt: skip
    ap.add_argument(
        "--only", type=_only, default=list(CHECKS),
        help=f"checks to run, e.g. memory,ps (default all: {','.join(CHECKS)})",
    )  # fmt: skip
    ap.add_argument(
        "--timeout", type=_positive, default=DEFAULT_TIMEOUT_S,
        help=f"seconds per run (default {DEFAULT_TIMEOUT_S})",
    )  # fmt: skip
    ap.add_argument(
        "--budget", type=_positive, default=None,
        help=f"seconds after which no further run starts (default {DEFAULT_BUDGET_S} on cuda, "
        "none on cpu)",
    )  # fmt: skip
    ap.add_argument(
        "--ps-batch", type=_positive, default=None,
        help="the positive control's batch (default: calibrated on the device)",
    )  # fmt: skip
    ap.add_argument(
        "--parallel", type=_positive, default=None,
        help="launches at a time in the training and memory checks (default: 4 on a 16-core "
        "CUDA machine, one per 4 cores; 1 on the CPU); the PS control's runs are always serial",
    )  # fmt: skip
    ap.add_argument(
        "--runs-root", default=None,
        help="keep the run directories here (default: a temporary directory, removed)",
    )  # fmt: skip
    return ap.parse_args(argv)


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _machine(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device,
    }
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10,
            check=False,
        )  # fmt: skip
        info["commit"] = head.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["commit"] = None
    return info


def _print_check(result: CheckResult) -> None:
    n = CHECKS.index(result.name) + 1
    print(f"[{n}/4] {TITLES[result.name]}: {result.status} ({_secs(result.elapsed_s)})")
    for line in result.lines:
        print(f"      {line}")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not cuda_available():
        print(SKIPPED_LINE)
        return 0
    out = Path(args.out)
    if not out.is_absolute():
        out = Path.cwd() / out
    if not out.parent.is_dir() or not os.access(out.parent, os.W_OK):
        print(
            f"gpu-check: cannot write {out}: give --out a file in a writable folder",
            file=sys.stderr,
        )
        return 2
    machine = _machine(args.device)
    print(
        f"gpu-check on {machine.get('gpu', 'the CPU')} ({args.device}), torch "
        f"{machine['torch']}, {machine['cpus']} cores; checks: {', '.join(args.only)}"
    )
    sys.stdout.flush()

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    keep = args.runs_root is not None
    root = Path(args.runs_root) if keep else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    root.mkdir(parents=True, exist_ok=True)
    budget = args.budget or (DEFAULT_BUDGET_S if args.device == "cuda" else None)
    started = time.monotonic()
    deadline = started + budget if budget else None
    parallel = args.parallel or default_parallel(args.device, os.cpu_count())
    ctx = Context(root.resolve(), args.device, args.timeout, log, deadline, parallel)
    results: list[CheckResult] = []
    training: dict[str, Run] | None = None
    ps: dict[str, Run] | None = None
    try:
        if "training" in args.only:
            t0 = time.monotonic()
            result, training = check_training(ctx)
            result.elapsed_s = time.monotonic() - t0
            results.append(result)
            _print_check(result)
        if "memory" in args.only:
            t0 = time.monotonic()
            result = check_memory(ctx)
            result.elapsed_s = time.monotonic() - t0
            results.append(result)
            _print_check(result)
        if "ps" in args.only:
            t0 = time.monotonic()
            result, ps = check_ps(ctx, args.ps_batch)
            result.elapsed_s = time.monotonic() - t0
            results.append(result)
            _print_check(result)
        if "determinism" in args.only:
            result = check_determinism(training, ps)
            results.append(result)
            _print_check(result)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    total = time.monotonic() - started
    print(table(results, total))
    doc = {
        "check": "gpu-check",
        "machine": machine,
        "runs_root": str(root) if keep else None,
        "timeout_s": args.timeout,
        "budget_s": budget,
        "total_s": round(total, 1),
        "passed": exit_code(results) == 0,
        "checks": [asdict(r) for r in sorted(results, key=lambda r: CHECKS.index(r.name))],
    }
    out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"written: {out}")
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
