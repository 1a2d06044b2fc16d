#!/usr/bin/env python3
"""EdgeGossip's ranking every epoch against every N epochs (``[edgegossip] rank_every``), or
the arms of another ``[edgegossip]`` key (``--key rank_sample``), on ``recipes/edgegossip.toml``:
the arms interleaved per seed, each a real launch; per run the test accuracy, the training time,
the ranking's share of epoch time and the aggregation's share. Resumable (rows.json in OUT);
prints median [min, max] over seeds per arm and writes ``OUT/rank-every.json``.

    benchmarks/edgegossip-rank/rank_every.py --out /tmp/rank --seeds 0 1 2 3 4 --arms 1 3
    benchmarks/edgegossip-rank/rank_every.py --out /tmp/mnist --seeds 1 2 \\
        --recipe benchmarks/edgegossip-rank/mnist.toml --set data.root=DIR
    benchmarks/edgegossip-rank/rank_every.py --out /tmp/sample --key rank_sample --arms 0 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("test_accuracy", "train_s", "rank_share", "aggregate_share", "overhead_share")


def launch(
    out: Path, recipe: Path, sets: list[str], key: str, arm: str, seed: int
) -> dict[str, object]:
    tag = f"r{arm}" if key == "rank_every" else f"{key}-{arm}"
    rd = out / f"{tag}-s{seed}"
    cmd = [
        sys.executable,
        "-m",
        "edgetrain",
        "launch",
        str(recipe),
        "--run-dir",
        str(rd),
        "--set",
        f"edgegossip.{key}={arm}",
        "--set",
        f"run.seed={seed}",
        "--quiet-logs",
    ]
    for kv in sets:
        cmd += ["--set", kv]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"run {tag}-s{seed} failed:\n{done.stderr[-2000:]}")
    s = json.loads((rd / "report" / "summary.json").read_text())
    rep = s["technique_report"]
    train, agg = float(s["train_s"]), float(rep.get("aggregate_max_s") or 0.0)
    # the reproduction's R-EG-3: (aggregation + ranking share x training) / (training + agg.)
    overhead = (agg + float(rep.get("rank_share") or 0.0) * train) / (train + agg)
    return {key: _value(arm), "seed": seed, "test_accuracy": s["test_accuracy"],
            "train_s": s["train_s"], "rank_share": rep.get("rank_share"),
            "aggregate_share": rep.get("aggregate_share"),
            "aggregate_s": agg, "overhead_share": overhead}  # fmt: skip


def _value(arm: str) -> int | float:
    number = float(arm)
    return int(number) if number.is_integer() else number


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--key", default="rank_every", help="the [edgegossip] key the arms set")
    ap.add_argument("--arms", nargs="+", default=["1", "3"])
    ap.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "edgegossip.toml")
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a recipe override for every run (edgetrain launch --set)",
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "rows.json"
    rows = json.loads(store.read_text()) if store.exists() else []
    key = args.key
    done = {(r[key], r["seed"]) for r in rows if key in r}
    for seed in args.seeds:
        for arm in args.arms:  # interleaved: both arms of a seed, then the next seed
            if (_value(arm), seed) not in done:
                rows.append(launch(args.out, args.recipe, args.sets, key, arm, seed))
                print(json.dumps(rows[-1]), flush=True)
                store.write_text(json.dumps(rows, indent=1))
    table = {}
    for arm in args.arms:
        mine = [r for r in rows if r.get(key) == _value(arm) and r["seed"] in args.seeds]
        table[str(arm)] = {}
        for k in KEYS:
            v = [float(r[k]) for r in mine if r[k] is not None]
            if v:
                table[str(arm)][k] = {"median": statistics.median(v), "min": min(v),
                                      "max": max(v)}  # fmt: skip
                print(f"{key} {arm}: {k} {statistics.median(v):.4f} "
                      f"[{min(v):.4f}, {max(v):.4f}] over {len(v)} seeds")  # fmt: skip
    doc = {"key": key, "recipe": str(args.recipe), "sets": args.sets, "seeds": args.seeds,
           "rows": rows, "summary": table}  # fmt: skip
    (args.out / "rank-every.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
