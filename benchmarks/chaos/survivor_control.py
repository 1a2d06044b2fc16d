#!/usr/bin/env python3
"""The PS survivor control of benchmarks/chaos: ``recipes/dynacomm.toml`` at 150 epochs with
``max_failed_fraction = 0.5`` and no restart; trainer 2 is killed (SIGKILL) at its epoch 10 and
trainer 1 trains on alone. One JSON line: the survivor's final accuracy and its lowest from
epoch 20 on.

    benchmarks/chaos/survivor_control.py scaled 0 --runs-root /tmp/ctl   # or: same 0
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("scaled", "same"), help="[ps] survivor_lr")
    ap.add_argument("seed", type=int)
    ap.add_argument("--runs-root", type=Path, default=Path("runs"))
    args = ap.parse_args()
    argv = [sys.executable, "-m", "edgetrain", "launch", str(ROOT / "recipes" / "dynacomm.toml"),
            "--runs-root", str(args.runs_root), "--events", "-", "--format", "json",
            "--set", "train.epochs=150", "--set", "run.max_failed_fraction=0.5",
            "--set", f"ps.survivor_lr={args.mode}", "--set", f"run.seed={args.seed}"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    run_dir, killed, curve, summary = None, False, [], None
    try:
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            run_dir = row.get("run_dir", run_dir)
            if row.get("event") == "epoch" and row.get("worker") == 1:
                curve.append((row["epoch"], row.get("test_accuracy")))
            due = row.get("event") == "epoch" and row.get("worker") == 2 and row["epoch"] >= 10
            if due and not killed and run_dir is not None:
                manifest = json.loads((Path(run_dir) / "manifest.json").read_text())
                pid = next(w["pid"] for w in manifest["workers"] if w["id"] == 2)
                os.kill(pid, signal.SIGKILL)
                killed = True
            if row.get("event") == "summary":
                summary = row
        code = proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    late = [a for e, a in curve if e >= 20 and a is not None]
    final = summary and summary.get("test_accuracy")
    print(json.dumps({
        "mode": args.mode, "seed": args.seed, "code": code, "killed": killed,
        "final": final, "lowest_from_20": min(late, default=None),
    }))  # fmt: skip
    return 0 if code == 0 and killed else 1


if __name__ == "__main__":
    sys.exit(main())
