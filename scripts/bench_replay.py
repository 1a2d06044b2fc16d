"""Benchmark: what mcPipe's replay costs, measured against its estimate, sequential beside
low-rank, with PipeDream (no replay) as the reference.

Three arms on the same run: the FC-heavy MLP of the specification's §7.5 (hidden 2048-2048-2048)
on digits, 2 stages (units 2 + 2) as 2 processes over loopback, microbatch 16, plain SGD
(lr 0.05), one thread per process, window extra ``--extra`` (0: stage 0 keeps 2 microbatches in
flight, so each forward replays 1 pending update):

- ``pipedream``: weight versions, no replay;
- ``mcpipe``: sequential replay (the newest weight rebuilt for each forward; bit-identical to
  PipeDream);
- ``mcpipe-lowrank``: ``[pipeline] replay = "lowrank"`` (the base's output corrected by the
  pending pairs, no weight formed; close to PipeDream, not bitwise).

Per arm and repetition: samples per second over epochs 2..N by the run's own training clock
(epoch 1 holds the warm-up), and per stage with pending updates mcPipe's replay over the rest of
its compute in CPU seconds (``replay_cpu_s`` / (``compute_cpu_s`` - ``replay_cpu_s``)) beside
its estimate: the specification's count of multiply-accumulates (one weight gradient per
pending update; low-rank: ``b (in + out)`` per pending update instead of ``in * out``, from the
unit table). The arms run interleaved, rotating their order each repetition. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipeline import edgetrain_rows, summary, window  # noqa: E402

ARMS = ("pipedream", "mcpipe", "mcpipe-lowrank")
DEFAULT_OUT = "benchmarks/pipeline/bench-replay.json"
MICROBATCH = 16
LR = 0.05
HIDDEN = (2048, 2048, 2048)
SPLIT = (2, 2)
GOAL = 1.1  # replay measured over its estimate (issue 29)


def recipe_text(arm: str, epochs: int, extra: int) -> str:
    technique = "pipedream" if arm == "pipedream" else "mcpipe"
    replay = '\nreplay = "lowrank"' if arm == "mcpipe-lowrank" else ""
    return (
        f'[run]\nname = "bench-replay-{arm}"\nseed = 0\ncheckpoint_every = 0\n\n'
        '[data]\ndataset = "digits"\n\n'
        f'[model]\nname = "mlp"\noptions = {{ hidden = {list(HIDDEN)} }}\n\n'
        f'[train]\nfamily = "pipeline"\ntechnique = "{technique}"\nepochs = {epochs}\n'
        f"batch_size = {MICROBATCH}\nlr = {LR}\nmomentum = 0.0\n\n"
        f"[pipeline]\nsplit = {list(SPLIT)}\nwindow_extra = {extra}{replay}\n\n"
        '[[workers]]\nrole = "stage"\ncount = 2\n'
    )


def estimates(extra: int) -> dict[str, dict[int, float]]:
    """Per arm, per stage: the replay over the rest of the stage's compute that the
    specification's count of multiply-accumulates gives (as the mcPipe reproduction's
    R-MP-G2): a forward, an input error (none for the model's first unit) and a weight
    gradient cost one unit's MACs each; sequential replay one weight gradient per pending
    update; low-rank replay each unit's share scaled by
    :func:`~edgetrain.pipeline.lowrank.replay_factor`."""
    import torch

    from edgetrain.models import build_model
    from edgetrain.pipeline import schedule
    from edgetrain.pipeline.chain import build_units
    from edgetrain.pipeline.lowrank import unit_factors
    from edgetrain.pipeline.table import unit_table

    shape = (1, 8, 8)
    with torch.device("meta"):
        model = build_model("mlp", shape, 10, {"hidden": list(HIDDEN)})
    infos = unit_table(build_units(model, "mlp"), shape)
    out: dict[str, dict[int, float]] = {"mcpipe": {}, "mcpipe-lowrank": {}}
    lo = 0
    for s, k in enumerate(SPLIT):
        part = infos[lo : lo + k]
        pending = schedule.in_flight(s, len(SPLIT), extra, None) - 1
        dw = sum(u.macs for u in part)
        di = sum(u.macs for i, u in enumerate(part, start=lo) if i > 0)
        low = sum(u.macs * f for u, f in zip(part, unit_factors(MICROBATCH, part), strict=True))
        rest = 2 * dw + di
        out["mcpipe"][s] = pending * dw / rest if rest else 0.0
        out["mcpipe-lowrank"][s] = pending * low / rest if rest else 0.0
        lo += k
    return out


def stage_replay(metrics_dir: Path) -> dict[int, dict[str, float]]:
    """Per stage index: its replay and compute CPU seconds from its final report."""
    from edgetrain.pipeline.stage_report import replay_share

    out: dict[int, dict[str, float]] = {}
    for f in sorted(metrics_dir.glob("worker-*.jsonl")):
        final = None
        for line in f.read_text().splitlines():
            row = json.loads(line)
            if row.get("event") == "final" and row.get("role_name") == "stage":
                final = row
        if final is None:
            continue
        t = final.get("timers") or {}
        mem = final.get("memory") or {}
        share = replay_share(t)
        out[int(final.get("role_index", 0))] = {
            "replay_cpu_s": float(t.get("replay_cpu_s") or 0.0),
            "compute_cpu_s": float(t.get("compute_cpu_s") or 0.0),
            "share": float(share) if share is not None else 0.0,
            "resident_bytes": int(mem.get("resident_bytes") or 0),
            "transient_peak_bytes": int(mem.get("transient_peak_bytes") or 0),
        }
    return out


def run_arm(arm: str, args: argparse.Namespace, tmp: Path, rep: int) -> dict[str, Any]:
    recipe = tmp / f"{arm}.toml"
    recipe.write_text(recipe_text(arm, args.epochs, args.extra))
    run_dir = tmp / f"{arm}-{rep}"
    argv = [sys.executable, "-m", "edgetrain", "launch", str(recipe), "--run-dir", str(run_dir)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=args.timeout, cwd=tmp, env=env, check=False
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-2000:]
        raise RuntimeError(f"edgetrain {arm} failed: {tail}")
    w = window(edgetrain_rows(run_dir / "metrics"), 2)
    return {"samples_per_s": w["samples_per_s"], "stages": stage_replay(run_dir / "metrics")}


def rotation(rep: int) -> list[str]:
    """The arms' order in repetition ``rep``: rotated by one each time."""
    k = rep % len(ARMS)
    return [*ARMS[k:], *ARMS[:k]]


def summarise(
    reps: Sequence[Mapping[str, Mapping[str, Any]]], est: Mapping[str, Mapping[int, float]]
) -> dict[str, Any]:
    """Per arm: samples/s and, per replaying stage, the replay share and measured / estimate;
    the ratios of the arms' speeds per repetition."""
    arms: dict[str, Any] = {}
    for arm in ARMS:
        speeds = [r[arm]["samples_per_s"] for r in reps]
        row: dict[str, Any] = {"samples_per_s": summary(speeds), "stages": {}}
        st0 = [r[arm]["stages"].get(0, {}) for r in reps]
        row["stage0_mib"] = {
            k: max(x.get(k, 0) for x in st0) / 2**20
            for k in ("resident_bytes", "transient_peak_bytes")
        }
        for s, e in sorted(est.get(arm, {}).items()):
            if e <= 0:
                continue
            shares = [r[arm]["stages"][s]["share"] for r in reps if s in r[arm]["stages"]]
            row["stages"][str(s)] = {
                "estimate": e,
                "share": summary(shares),
                "measured_over_estimate": summary([v / e for v in shares]),
                "goal": GOAL,
            }
        arms[arm] = row
    ratios = {
        f"{a}/{b}": summary([r[a]["samples_per_s"] / r[b]["samples_per_s"] for r in reps])
        for a, b in (("mcpipe", "pipedream"), ("mcpipe-lowrank", "pipedream"),
                     ("mcpipe-lowrank", "mcpipe"))
    }  # fmt: skip
    return {"arms": arms, "speed_ratios": ratios}


def table(result: Mapping[str, Any]) -> str:
    s = result["summary"]
    lines = [
        f"mcPipe's replay: MLP {list(HIDDEN)} on digits, 2 stages over loopback, microbatch "
        f"{MICROBATCH}, window extra {result['extra']}; {result['repeats']} repetitions, arms "
        f"interleaved; median [min, max]",
        "",
        "| arm | stage 0 resident / peak MiB | samples/s | stage | replay / rest of compute | "
        "estimate | measured / estimate |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, row in s["arms"].items():
        sp, mib = row["samples_per_s"], row["stage0_mib"]
        first = (
            f"| {arm} | {mib['resident_bytes']:.1f} / {mib['transient_peak_bytes']:.1f} | "
            f"{sp['median']:.0f} [{sp['min']:.0f}, {sp['max']:.0f}]"
        )
        if not row["stages"]:
            lines.append(first + " | - | - | - | - |")
        for st, v in row["stages"].items():
            sh, mo = v["share"], v["measured_over_estimate"]
            lines.append(
                f"{first} | {st} | {sh['median']:.4f} [{sh['min']:.4f}, {sh['max']:.4f}] | "
                f"{v['estimate']:.4f} | {mo['median']:.2f}x [{mo['min']:.2f}, {mo['max']:.2f}] |"
            )
            first = "| | | |"
    lines.append("")
    for k, v in s["speed_ratios"].items():
        lines.append(f"samples/s {k}: {v['median']:.3f}x [{v['min']:.3f}, {v['max']:.3f}]")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="scripts/bench_replay",
        description="mcPipe's replay, sequential and low-rank, against its estimate, with "
        "PipeDream beside (arms interleaved). Example: scripts/bench_replay --repeats 5",
    )
    ap.add_argument("--repeats", type=int, default=5, help="repetitions per arm (default 5)")
    ap.add_argument("--epochs", type=int, default=4, help="epochs per run, >= 2 (default 4)")
    ap.add_argument("--extra", type=int, default=0, help="window extra e (default 0)")
    ap.add_argument("--quick", action="store_true", help="2 repetitions of 3 epochs")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per run (default 600)")
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"JSON out (default {DEFAULT_OUT})")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.epochs = 2, 3
    if args.repeats < 1 or args.epochs < 2 or args.extra < 0:
        ap.error("--repeats at least 1, --epochs at least 2 (epoch 1 is the warm-up), --extra >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    est = estimates(args.extra)
    load_before = os.getloadavg()
    started = time.time()
    reps: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        for rep in range(args.repeats):
            got = {}
            for arm in rotation(rep):
                got[arm] = run_arm(arm, args, Path(tmp), rep)
                print(
                    f"  {rep + 1}/{args.repeats} {arm}: {got[arm]['samples_per_s']:.0f} samples/s",
                    file=sys.stderr,
                )
            reps.append(got)
    import torch

    from edgetrain.experiment.report import code_commit

    result = {
        "benchmark": "replay",
        "code": code_commit(),
        "repeats": args.repeats,
        "epochs": args.epochs,
        "extra": args.extra,
        "settings": {
            "model": f"mlp {list(HIDDEN)}",
            "dataset": "digits",
            "microbatch": MICROBATCH,
            "optimizer": f"SGD lr={LR}",
            "split": list(SPLIT),
            "threads_per_process": 1,
            "link": "loopback",
        },  # fmt: skip
        "estimates": {a: {str(s): v for s, v in e.items()} for a, e in est.items()},
        "repetitions": reps,
        "summary": summarise(reps, est),
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "loadavg_before": list(load_before),
            "loadavg_after": list(os.getloadavg()),
            "seconds": round(time.time() - started, 1),
        },  # fmt: skip
    }
    out = Path(args.out)
    if not out.is_absolute():
        out = REPO / out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(table(result))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("scripts/bench_replay: interrupted; nothing written", file=sys.stderr)
        sys.exit(130)
    except RuntimeError as exc:
        print(f"scripts/bench_replay: {exc}", file=sys.stderr)
        sys.exit(1)
