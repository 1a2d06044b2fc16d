"""Benchmark: the quickstart's time to its first training step, and where the time goes.

Each repeat launches ``recipes/quickstart.toml`` (one epoch, no checkpoints) as a user does,
reads its ``--events -`` stream as rows arrive, and splits the time from the command's start
into phases:

- ``launcher``: the launch command until its run directory exists (imports, the recipe, the
  data and model checks);
- ``spawn``: until every worker has registered with the coordinator (process start, imports);
- ``setup``: until every worker is ready (data, model, the technique's set-up);
- ``start``: until the coordinator starts the run;
- ``first_epoch``: until the first epoch's barrier (the first steps, then the epoch's end).

``--baseline REV`` runs the same launch from a git worktree of REV, interleaved with this tree
(ABAB...), and prints each phase's ratio: the before and after of a start-up change measured
side by side in one run. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PHASES = ("launcher", "spawn", "setup", "start", "first_epoch")


def _metrics(run_dir: Path, event: str) -> list[float]:
    """Coordinator-clock times of ``event`` rows in the workers' metrics."""
    out = []
    for f in sorted((run_dir / "metrics").glob("worker-*.jsonl")):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            if row.get("event") == event:
                out.append(float(row["t"]))
                break
    return out


def one_launch(code: Path, runs: Path, timeout: float) -> dict[str, float]:
    """Launch the quickstart from the tree at ``code``; the phases' seconds."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    argv = [
        sys.executable, "-m", "edgetrain", "launch", str(code / "recipes" / "quickstart.toml"),
        "--runs-root", str(runs), "--events", "-", "--format", "json",
        "--set", "train.epochs=1", "--set", "run.checkpoint_every=0",
    ]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=code, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    arrivals: queue.Queue[tuple[float, dict[str, Any]] | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                arrivals.put((time.perf_counter() - t0, json.loads(line)))
        arrivals.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: dict[str, tuple[float, dict[str, Any]]] = {}
    deadline = time.monotonic() + timeout
    while True:
        item = arrivals.get(timeout=max(0.1, deadline - time.monotonic()))
        if item is None:
            break
        at, row = item
        seen.setdefault(str(row.get("event")), (at, row))
    if proc.wait(timeout=60) != 0:
        raise SystemExit(f"bench_startup: the launch from {code} failed (exit {proc.returncode})")
    run_dir = Path(seen["launch"][1]["run_dir"])
    started_at, started = seen["started"]
    offset = started_at - float(started["t"])  # coordinator clock -> this clock
    registered = max(_metrics(run_dir, "registered")) + offset
    ready = max(_metrics(run_dir, "ready")) + offset
    first = seen["barrier"][0] if "barrier" in seen else seen["epoch"][0]
    marks = [seen["launch"][0], registered, ready, started_at, first]
    steps = [marks[0], *(b - a for a, b in itertools.pairwise(marks))]
    phases = dict(zip(PHASES, steps, strict=True))
    phases["total"] = first
    return {k: round(v, 3) for k, v in phases.items()}


def _worktree(rev: str, into: Path) -> Path:
    path = into / "baseline"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), rev],
        check=True, capture_output=True,
    )  # fmt: skip
    return path


def _summary(rows: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    keys = (*PHASES, "total")
    return {
        k: {
            "median": round(statistics.median(r[k] for r in rows), 3),
            "min": min(r[k] for r in rows),
            "max": max(r[k] for r in rows),
        }
        for k in keys
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="launches per tree (default 5)")
    ap.add_argument("--baseline", help="a git revision to run beside this tree, interleaved")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per launch")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        trees = {"this tree": REPO}
        if args.baseline:
            trees = {f"baseline {args.baseline}": _worktree(args.baseline, Path(tmp)), **trees}
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        try:
            for i in range(args.repeats):
                for name, code in trees.items():  # interleaved: ABAB...
                    rows[name].append(one_launch(code, Path(tmp) / "runs", args.timeout))
                    print(f"  {i + 1}/{args.repeats} {name}: {rows[name][-1]}", file=sys.stderr)
        finally:
            if args.baseline:
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force",
                     str(Path(tmp) / "baseline")],
                    capture_output=True,
                )  # fmt: skip
    result = {
        "benchmark": "startup",
        "recipe": "recipes/quickstart.toml (train.epochs=1, no checkpoints)",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "runs": rows,
        "summary": {name: _summary(r) for name, r in rows.items()},
    }
    names = list(rows)
    if len(names) == 2:
        base, new = (result["summary"][n] for n in names)
        result["ratio"] = {
            k: round(base[k]["median"] / new[k]["median"], 2) if new[k]["median"] > 0 else None
            for k in (*PHASES, "total")
        }
    if args.format == "json":
        print(json.dumps(result, indent=2))
        return
    print(f"time to the first epoch's end, seconds (median [min, max] of {args.repeats})")
    header = f"{'phase':<12}" + "".join(f"{n:>28}" for n in names)
    if "ratio" in result:
        header += f"{'speed-up':>10}"
    print(header)
    for k in (*PHASES, "total"):
        line = f"{k:<12}"
        for n in names:
            s = result["summary"][n][k]
            line += f"{s['median']:>10.2f} [{s['min']:.2f}, {s['max']:.2f}]".rjust(28)
        if "ratio" in result:
            r = result["ratio"][k]
            line += f"{r:>9.2f}x" if r is not None else f"{'-':>10}"
        print(line)


if __name__ == "__main__":
    main()
