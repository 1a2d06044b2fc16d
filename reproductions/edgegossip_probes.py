"""What the EdgeGossip reproduction measures beside its runs, each kept once measured:
R-EG-5, the step time of every emulated host under 13 load levels (the histories its predictor
fits on), and R-EG-4, the time to generate the aggregates against one training epoch."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment.beds import Bed
from edgetrain.experiment.kept import kept
from reproductions.edgegossip_plan import HOSTS, LEVELS, Plan, batch_of

Say = Callable[[str], None]


def profile_argv(p: Plan, host: str, history: Path, bed: Bed) -> list[str]:
    """``edgetrain profile --contention`` of the run's model on ``host``."""
    mnist = p.dataset == "mnist"
    args = ["-m", "edgetrain", "profile", "--model", p.model]
    args += ["--input", "1x28x28" if mnist else "1x8x8", "--batch-sizes", "64" if mnist else "32"]
    args += ["--repeats", "3", "--warmup", "2", "--min-time", "0.2", "--contention"]
    args += ["--levels", ",".join(f"{v:g}" for v in LEVELS), "--history", str(history)]
    args += ["--host-name", host, "--format", "json"]
    return bed.command(host, args)


def profile_hosts(p: Plan, bed: Bed, out: Path, say: Say) -> dict[str, Any]:
    """``edgetrain profile --contention`` inside every host (one at a time): the history each
    worker's predictor fits RG(U) on, and the held-out error per host."""
    result: dict[str, Any] = {}
    for host in ("localhost",) if bed.hosts is None else HOSTS:
        path = out / "profiles" / f"{host}.json"
        result[host] = kept(path, lambda: _profile(p, host, bed, out, say))  # noqa: B023
    return result


def _profile(p: Plan, host: str, bed: Bed, out: Path, say: Say) -> dict[str, Any]:
    history = out / "profiles" / f"{host}.history.jsonl"
    history.unlink(missing_ok=True)  # a half-made profile: start it again
    history.parent.mkdir(parents=True, exist_ok=True)
    say(f"profiling {host} under 13 load levels (R-EG-5)")
    started = time.monotonic()
    proc = subprocess.run(
        profile_argv(p, host, history, bed), capture_output=True, text=True, timeout=3600
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EdgetrainError(f"profiling {host} failed: {tail}")
    data = json.loads(proc.stdout)["contention"]
    return {
        "mape_held_out": data["mape_held_out"],
        "mape_by_level": data["mape_by_level"],
        "t0_s": data["t0_s"],
        "records": data["samples"],
        "seconds": time.monotonic() - started,
    }


def aggregation_costs(p: Plan, root: Path | None, out: Path, say: Say) -> dict[str, Any]:
    """Generation time per step of each combination at each ratio and size, beside the time
    of one training epoch of the run's model on the same samples, in this process."""
    return dict(kept(out / "aggregation.json", lambda: _aggregation(p, root, say)))


def _aggregation(p: Plan, root: Path | None, say: Say) -> dict[str, Any]:
    import numpy as np
    import torch

    from edgetrain.aggregate import AggregateConfig, build_aggregates
    from edgetrain.data import load_dataset
    from edgetrain.models import build_model
    from edgetrain.recipe import DataSection, TrainSection
    from edgetrain.runtime.trainer import LocalTrainer

    say("timing the aggregates (R-EG-4)")
    torch.set_num_threads(1)
    cfg = DataSection(dataset=p.dataset, root=str(root) if root else None)
    ds = load_dataset(cfg, 0)
    sizes = [n for n in (2000, 8000) if n <= len(ds.y_train)] or [len(ds.y_train)]
    combos = (("svd-sample", "kmeans"), ("svd", "kmeans"), ("isvd", "lsh"), ("hash", "kmeans"))
    rows: list[dict[str, Any]] = []
    epochs: dict[str, float] = {}
    for n in sizes:
        x, y = ds.x_train[:n], ds.y_train[:n]
        model = build_model(p.model, ds.input_shape, ds.classes)
        batch = batch_of(p)
        tr = LocalTrainer(
            model, x, y, ds.x_test[:1], ds.y_test[:1], TrainSection(batch_size=batch, lr=0.01), 0, 0
        )
        started = time.perf_counter()
        for xb, yb in tr.batches(0):
            tr.step(xb, yb)
        epochs[str(n)] = time.perf_counter() - started
        for reduce, divide in combos:
            for ratio in (5, 10, 20):
                agg = build_aggregates(x, y, AggregateConfig(reduce, divide, ratio, seed=0))
                total = sum(agg.timings.values())
                rows.append(
                    {
                        "samples": n,
                        "method": agg.method,
                        "ratio": ratio,
                        "points": len(agg.points),
                        "timings": agg.timings,
                        "total_s": total,
                        "of_epoch": total / epochs[str(n)],
                    }
                )
    return {
        "epoch_s": epochs,
        "rows": rows,
        "model": p.model,
        "dataset": p.dataset,
        "where": "the launcher's process, one thread (not inside an emulated host)",
        "mean_subset": float(np.mean([r["points"] for r in rows])),
    }
