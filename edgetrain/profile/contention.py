"""``--contention``: step times under generated co-running load, the predictor, and its error.

Every window's step time is its wall time over its steps (the throughput the balancer needs):
under a CPU quota a step's own duration hides the throttled periods between steps, and the
median step of an emulated 0.19-core host read 5 ms while it ran one step every 16 ms. The
uncontended t0 is the mean of two windows without generated load. Then at each load intensity
(the load generator of :mod:`edgetrain.profile.loadgen`, CPU plus disk writes, as a fraction of
the scope's CPU: the machine's cores, or an emulated host's quota) training steps run in
``windows`` windows of ``window_s`` seconds while the sampler records the co-running
contention U (inside an emulated host: its cgroup's other processes,
:mod:`edgetrain.profile.scope`). Each window is one :class:`ContentionRecord`. Records are
appended to the history file, the predictor is fitted on the whole history, and its error is
reported on held-out levels of this run.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.errors import EdgetrainError
from edgetrain.profile.compute import ComputeConfig, _Trainer
from edgetrain.profile.loadgen import load
from edgetrain.profile.predictor import (
    ContentionRecord,
    Predictor,
    append_history,
    held_out_mape,
    read_history,
)
from edgetrain.profile.sampler import Sampler
from edgetrain.profile.scope import resolve_scope

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]


def _window(
    tr: _Trainer, bs: int, window_s: float, scope: Any, load_pids: Sequence[int] = ()
) -> tuple[float, tuple[float, float, float]]:
    """The mean step time (wall time over steps) and mean contention of one window of training
    steps (``load_pids``: the generated load, which is co-running although it runs in this
    process's children)."""
    x, y = tr.batch(bs)
    steps = 0
    # On an emulated host the host's cgroup is the scope, as for EdgeGossip's live predictor;
    # there the sampler leaves this process's children out unless they are named co-running.
    with Sampler(
        interval_s=min(0.1, window_s / 10), scope=scope, co_pids=lambda: load_pids
    ) as sampler:
        start = time.monotonic()
        end = start + window_s
        while time.monotonic() < end or steps < 3:
            tr.plain_step(x, y)
            steps += 1
        elapsed = time.monotonic() - start
    mean = sampler.mean()
    u = mean.contention if mean is not None else (0.0, 0.0, 0.0)
    return elapsed / steps, u


def scope_cores(scope: Any) -> float | None:
    """The CPU the generated load is a fraction of: the scope's quota (None: the machine)."""
    share = scope.share() if scope is not None else None
    return float(share) if share else None


def measure_contention(
    model: Any,
    input_shape: Sequence[int],
    cfg: ComputeConfig,
    model_name: str,
    levels: Sequence[float],
    windows: int = 3,
    window_s: float = 2.0,
    progress: Progress | None = None,
) -> list[ContentionRecord]:
    """Records of this run: ``windows`` per level, all against one uncontended t0."""
    tr = _Trainer(model, cfg, input_shape)
    bs = cfg.batch_sizes[0]
    run = uuid.uuid4().hex[:12]
    x, y = tr.batch(bs)
    for _ in range(cfg.warmup):
        tr.plain_step(x, y)
    scope = resolve_scope("auto")
    cores = scope_cores(scope)
    t0 = float(np.mean([_window(tr, bs, window_s, scope)[0] for _ in range(2)]))
    records: list[ContentionRecord] = []
    total = len(levels) * windows
    for i, level in enumerate(levels):
        with load(level, cores=cores) as procs:
            pids = [p.pid for p in procs]
            for _ in range(cfg.warmup):
                tr.plain_step(x, y)
            for w in range(windows):
                t, u = _window(tr, bs, window_s, scope, pids)
                records.append(ContentionRecord(run, model_name, bs, level, u, t0, t))
                if progress:
                    progress(f"contention level {level:g}", i * windows + w + 1, total)
    return records


def run_contention(
    req: Any, levels: Sequence[float], history: Path | None, progress: Progress | None = None
) -> dict[str, Any]:
    """Measure, append to the history, fit the predictor, report its held-out error."""
    from edgetrain.models import build_model
    from edgetrain.profile.onnx_costs import graph_input_shape

    cfg = ComputeConfig(
        batch_sizes=req.batch_sizes, warmup=req.warmup, repeats=req.repeats, device=req.device
    )
    name, shape = req.model, tuple(req.input_shape)
    if str(name).lower().endswith(".onnx") or Path(name).is_file():
        onnx_shape = graph_input_shape(Path(name))
        if req.torch_model is None or onnx_shape is None:
            raise EdgetrainError(
                "--contention needs a model to run", "give a zoo model, or --torch-model for ONNX"
            )
        name, shape = req.torch_model, tuple(onnx_shape)
    options = dict(req.model_options) if name == req.model else {}
    model = build_model(name, shape, req.classes, options)
    records = measure_contention(model, shape, cfg, name, levels, progress=progress)
    past = read_history(history) if history is not None else []
    if history is not None:
        append_history(history, records)
    every = past + records
    mape, per_level = held_out_mape(every, records[0].run)
    pred = Predictor().fit(every)
    bs = cfg.batch_sizes[0]
    t0 = records[0].t0
    return {
        "run": records[0].run,
        "samples": len(every),
        "history_samples": len(past),
        "history": str(history) if history is not None else None,
        "levels": list(levels),
        "t0_s": t0,
        "records": [r.to_dict() for r in records],
        "mape_held_out": mape,
        "mape_by_level": {f"{k:g}": v for k, v in per_level.items()},
        "predicted": [
            {
                "level": r.level,
                "u": list(r.u),
                "rg": pred.predict_rg(r.u),
                "samples_per_s": pred.throughput(bs / t0, r.u),
            }
            for r in {r.level: r for r in reversed(records)}.values()
        ],
    }
