"""Profile four models, plan them at three bandwidths, and print the strategies' times."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

MODELS = ("resnet152", "vgg19", "googlenet", "mobilenet_v2")
BANDWIDTHS = ("10mbit", "100mbit", "1gbit")
from edgetrain.plan.strategies import STRATEGIES  # noqa: E402 - the four planned strategies


def _edgetrain(*args: str) -> str:
    cmd = [sys.executable, "-m", "edgetrain", *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr}")
    return done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_dir", nargs="?", help="where profiles and plans go (default: a temp dir)")
    ap.add_argument("--input", default="3x224x224")
    ap.add_argument("--batch", default="2")
    ap.add_argument("--rtt", default="10ms", help="dt estimate (the paper's cloud RTT)")
    ap.add_argument("--repeats", default="3")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    run = Path(args.run_dir or tempfile.mkdtemp(prefix="plan-table-"))
    run.mkdir(parents=True, exist_ok=True)
    print(
        f"profiles and plans in {run}; input {args.input}, batch {args.batch}, dt = rtt {args.rtt}",
        file=sys.stderr,
    )
    rows = []
    for model in args.models.split(","):
        print(f"profiling {model} ...", file=sys.stderr)
        _edgetrain(
            "profile",
            "--model",
            model,
            "--input",
            args.input,
            "--batch-sizes",
            args.batch,
            "--repeats",
            args.repeats,
            "--warmup",
            "1",
            "--min-time",
            "0",
            "--run-dir",
            str(run),
            "--host-name",
            model,
            "--format",
            "json",
        )
        doc = json.loads(
            _edgetrain(
                "plan",
                "--profile",
                str(run / "profiles" / f"{model}.json"),
                "--bandwidth",
                ",".join(BANDWIDTHS),
                "--rtt",
                args.rtt,
                "--name",
                model,
                "--format",
                "json",
            )
        )
        for entry in doc["bandwidths"]:
            s = entry["strategies"]
            best_other = min(s[k]["iteration_s"] for k in STRATEGIES if k != "dynacomm")
            ok = s["dynacomm"]["iteration_s"] <= best_other * (1 + 1e-9)
            rows.append(
                (
                    model,
                    entry["bandwidth"],
                    [s[k]["iteration_s"] for k in STRATEGIES],
                    s["dynacomm"]["speedup_vs_sequential"],
                    ok,
                    entry["verdict"]["max_saving_fraction"],
                )
            )
    print(
        "| model | link | sequential s | lbl s | ibatch s | dynacomm s | speed-up vs seq | "
        "overlap ceiling | dynacomm best |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for model, bw, times, speedup, ok, ceiling in rows:
        cells = " | ".join(f"{t:.3f}" for t in times)
        print(
            f"| {model} | {bw} | {cells} | {speedup:.2f}x | {ceiling:.0%} | "
            f"{'yes' if ok else 'NO'} |"
        )
    if not all(r[4] for r in rows):
        sys.exit("DynaComm was beaten somewhere: a bug")


if __name__ == "__main__":
    main()
