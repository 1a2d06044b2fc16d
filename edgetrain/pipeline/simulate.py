"""Every stage of a pipeline in one process: the reference the multi-process runs must equal.

Stages run their fixed orders (:mod:`.schedule`) and hand activations and errors through
in-memory queues; any interleaving of the stages gives the same weights (``interleave``: the
stages take turns in order, or in a seeded random order). With ``trace`` every operation logs a
digest of the weights it used per unit, so two schedules can be compared per microbatch.
Used by the tests (mcPipe against PipeDream, window one against Local, processes against this)
and by the reproduction's correctness phase.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetrain.pipeline import feed, schedule
from edgetrain.pipeline.chunked import chunk_elems
from edgetrain.pipeline.stage_build import Stage, cut, make_stage, stage_state
from edgetrain.pipeline.stores import Hyper
from edgetrain.pipeline.table import unit_table


def digest(weights: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(weights):
        h.update(name.encode())
        h.update(weights[name].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass
class SimResult:
    """Final weights (joined stages), per-microbatch losses, traces and memory per stage."""

    weights: dict[str, np.ndarray]
    losses: list[float] = field(default_factory=list)
    trace: list[tuple[Any, ...]] = field(default_factory=list)
    memory: list[dict[str, int]] = field(default_factory=list)
    modes: list[list[str]] = field(default_factory=list)


def run(
    make_model: Callable[[], nn.Module],
    model_name: str,
    input_shape: Sequence[int],
    x: np.ndarray,
    y: np.ndarray,
    bounds: Sequence[tuple[int, int]],
    technique: str,
    *,
    epochs: int = 1,
    microbatch: int = 8,
    hyper: Hyper | None = None,
    seed: int = 0,
    extra: int = 0,
    uniform: int | None = None,
    cap: int | None = None,
    store: str = "mixed",
    trace: bool = False,
    interleave: str = "turns",
    device: torch.device | None = None,
    chunk_mib: float = 0.0,
    replay: str = "sequential",
    keep_rebuilt: bool = False,
) -> SimResult:
    """Train ``epochs`` epochs of the pipeline cut at ``bounds`` with ``technique``'s store,
    every stage on ``device`` (None: the CPU), with chunked unit kernels of ``chunk_mib`` MiB
    (0: off), as ``[pipeline] chunk_mib``, and mcPipe's ``replay`` (``[pipeline] replay``);
    ``keep_rebuilt``: mcPipe's rebuilt weights into one kept buffer (as a run without
    ``mmap_threshold``)."""
    hyper = hyper or Hyper(0.05)
    n = len(bounds)
    stages: list[Stage] = []
    with torch.device("meta"):
        meta_units = cut(make_model(), model_name, (0, bounds[-1][1]))
    infos = unit_table(meta_units, input_shape)
    for s, (lo, hi) in enumerate(bounds):
        units = cut(make_model(), model_name, (lo, hi))
        stages.append(
            make_stage(
                units, infos[lo:hi], technique, hyper, last=s == n - 1, seed=seed,
                input_shape=infos[lo].in_shape, store=store, microbatch=microbatch,
                device=device, chunk=chunk_elems(chunk_mib), lowrank=replay == "lowrank",
                keep_rebuilt=keep_rebuilt,
            )
        )  # fmt: skip
    result = SimResult({}, modes=[st.choice.modes for st in stages])
    rng = random.Random(seed)
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))
    for epoch in range(1, epochs + 1):
        batches = feed.epoch_order(len(x), microbatch, seed, epoch, cap)
        m = len(batches)
        orders = [schedule.order(s, n, m, extra, uniform) for s in range(n)]
        pos = [0] * n
        acts: list[dict[int, tuple[torch.Tensor, torch.Tensor]]] = [{} for _ in range(n)]
        grads: list[dict[int, torch.Tensor]] = [{} for _ in range(n)]
        while any(p < len(o) for p, o in zip(pos, orders, strict=True)):
            turn = list(range(n))
            if interleave == "random":
                rng.shuffle(turn)
            progressed = False
            for s in turn:
                if pos[s] == len(orders[s]):
                    continue
                op = orders[s][pos[s]]
                st = stages[s]
                if op.kind == "F":
                    if s == 0:
                        idx = torch.from_numpy(batches[op.mb])
                        inp, lab = xt[idx].to(device or "cpu"), yt[idx].to(device or "cpu")
                    elif op.mb in acts[s]:
                        inp, lab = acts[s].pop(op.mb)
                    else:
                        continue
                    if trace:
                        _log_forward(result, st, s, epoch, op.mb)
                    out = st.executor.forward(epoch, op.mb, inp, lab if s == n - 1 else None)
                    if s < n - 1:
                        acts[s + 1][op.mb] = (out, lab)
                    else:
                        result.losses.append(float(out))
                else:
                    if s < n - 1 and op.mb not in grads[s]:
                        continue
                    g = grads[s].pop(op.mb) if s < n - 1 else None
                    micro = st.executor.flight[0]
                    assert micro.j == op.mb, "the order is FIFO"
                    if trace:
                        _log_backward(result, st, s, epoch, op.mb, micro.version)
                    dx, _ = st.executor.step(g)
                    if s > 0:
                        assert dx is not None
                        grads[s - 1][op.mb] = dx
                st.executor.sample()
                pos[s] += 1
                progressed = True
            if not progressed:
                raise RuntimeError(f"the stages deadlocked at positions {pos}")
    for st in stages:
        result.weights.update(stage_state(st))
        result.memory.append(st.store.acc.figures())
        st.executor.close()
    return result


def _log_forward(result: SimResult, st: Stage, s: int, epoch: int, j: int) -> None:
    v = st.store.latest
    for u in range(len(st.units)):
        w = st.store.forward_weights(u, v)
        result.trace.append((s, epoch, "F", j, u, v, digest(w)))


def _log_backward(result: SimResult, st: Stage, s: int, epoch: int, j: int, v: int) -> None:
    for u in range(len(st.units)):
        w = st.store.backward_weights(u, v)
        # a ``latest`` unit runs the backward at the newest version, not the forward's
        used = st.store.latest if st.store.state[u].mode == "latest" else v
        result.trace.append((s, epoch, "B", j, u, used, digest(w)))
