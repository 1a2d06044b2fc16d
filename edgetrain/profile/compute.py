"""Compute profile of a model on this device: per-layer times, step time, throughput, memory.

Every figure comes from at least ``repeats`` runs after ``warmup`` runs, and from as many more
as fill ``min_time_s`` (at most :data:`MAX_REPEATS`): a millisecond step measured ten times
samples a few scheduler time slices only, so one burst of another process's work would skew
it. Hooked steps (per-layer times,
see :mod:`edgetrain.profile.timeline`) alternate with plain steps, so slow drifts of a shared
machine hit both alike. Labels are random. Inputs are the run's own samples where the caller
gives them (``inputs``: ``edgetrain profile --data``, and advise's own profiles), else random
normal: timing depends on them. On this project's machine (torch 2.14, one thread) a step of
LeNet-5 on MNIST digits took 9-10% less time than on N(0, 1) noise, and of cnn2 15% less; the
same digits with their pixels shuffled took as long as noise, a constant image less still, so
it is the images' flat regions (max-pooling and ReLU over them), not their values' range.

Estimator: the mean of the *faster half* of the runs (those at or below the median). Other
processes can only add time to a run (preemption, cache eviction), so the faster half tracks
the device's own cost, and means add up: per-layer times are averaged over the faster half of
the hooked steps (ranked by their total), so the layers sum to that half's mean step, which is
compared with ``step_s``, the same estimator over plain steps. Per-layer medians would not add
up on a busy machine, since each short interval's median drops the preemptions that a whole
step's median contains. ``step_median_s`` and the inter-quartile ranges (``*_iqr_s``, each
layer's over all runs) are reported beside them; how co-running load slows training is the
predictor's job (:mod:`edgetrain.profile.predictor`).

Under a CPU quota (a cgroup's CFS quota: an emulated host, a container) a process that uses up
its quota early in a period waits out the rest, and the runs that held those waits are the
slower half: there the faster half measures the burst pace, one unthrottled core's (for one
thread), not the share the host gives. So under a quota (``quota`` set) the timed runs span at
least :data:`QUOTA_PERIODS` periods, and ``sustained_step_s`` (the mean over all of them, waits
included) is reported beside ``step_s``, with ``throttle_factor``, their ratio (about 1 over the
quota's cores for one CPU-bound thread). A cost model that runs a device at its average share
reads the layers as one unthrottled core's (``reference_cpu`` 1); one that models the bursts
(the gossip family's) reads them as the burst pace.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from edgetrain.errors import EdgetrainError
from edgetrain.models.layers import LayerSpec
from edgetrain.profile.memory import peak_memory
from edgetrain.profile.timeline import LayerTimeline

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]  # (what, done, total)
MAX_REPEATS = 1000
#: Under a CPU quota, timed runs span at least this many quota periods (one period's wait lands
#: in one run or another: over 20 periods its share is measured within about 5%).
QUOTA_PERIODS = 20


@dataclass(frozen=True)
class ComputeConfig:
    """What to measure and how often."""

    batch_sizes: tuple[int, ...]
    warmup: int = 3
    repeats: int = 10
    min_time_s: float = 1.0
    device: str = "cpu"
    lr: float = 0.01
    num_classes: int = 10
    #: The CPU quota this process runs under, (cores, period seconds); None: no quota.
    quota: tuple[float, float] | None = None
    #: Samples to time the steps on (float32, N x the input shape), cycled to each batch size;
    #: None: random normal inputs.
    inputs: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def timed_s(self) -> float:
        """How long the timed runs of one phase last at least."""
        if self.quota is None:
            return self.min_time_s
        return max(self.min_time_s, QUOTA_PERIODS * self.quota[1])

    def __post_init__(self) -> None:
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise EdgetrainError(
                f"batch sizes {list(self.batch_sizes)} invalid", "give positive ints like 8,16,32"
            )
        if self.repeats < 1 or self.warmup < 0:
            raise EdgetrainError("--repeats must be >= 1 and --warmup >= 0")


@dataclass(frozen=True)
class LayerProfile:
    """One layer spec's measured costs (seconds at the first batch size)."""

    name: str
    param_bytes: int
    activation_bytes: int
    fwd_s: float
    bwd_s: float
    fwd_iqr_s: float
    bwd_iqr_s: float


@dataclass(frozen=True)
class ComputeProfile:
    """The result of :func:`profile_compute`."""

    layers: tuple[LayerProfile, ...]
    step_s: float
    step_iqr_s: float
    step_median_s: float
    hooked_step_s: float
    throughput: dict[int, float]
    step_s_by_batch: dict[int, float]
    peak_memory_bytes: int
    peak_memory_by_batch: dict[int, int]
    peak_memory_source: str
    repeats: int
    warmup: int
    quota: tuple[float, float] | None = None
    #: the mean step over runs spanning many quota periods (``step_s`` without a quota)
    sustained_step_s: float = 0.0

    @property
    def throttle_factor(self) -> float:
        """``sustained_step_s`` over ``step_s``: 1.0 without a quota."""
        if self.quota is None or self.step_s <= 0:
            return 1.0
        return self.sustained_step_s / self.step_s

    @property
    def layer_sum_s(self) -> float:
        return float(sum(lp.fwd_s + lp.bwd_s for lp in self.layers))

    @property
    def layer_sum_ratio(self) -> float:
        """Sum of per-layer forward+backward times over the measured ``step_s``."""
        return self.layer_sum_s / self.step_s if self.step_s > 0 else float("nan")


def _iqr(a: np.ndarray) -> np.ndarray:
    q75, q25 = np.percentile(a, [75, 25], axis=0)
    return np.asarray(q75 - q25)


def _faster_half(totals: np.ndarray) -> np.ndarray:
    """Indices of the runs at or below the median total (never empty)."""
    return np.flatnonzero(totals <= np.median(totals))


def estimate(times: list[float], quota: tuple[float, float] | None = None) -> float:
    """Mean of the faster half of ``times``; under a ``quota``, the mean of all (see the
    module docstring)."""
    a = np.asarray(times)
    if quota is not None:
        return float(a.mean())
    return float(a[_faster_half(a)].mean())


def run_layout(samples: np.ndarray) -> torch.Tensor:
    """``samples`` as a run's workers hold them (``torch.from_numpy`` of the contiguous array),
    whose batches they take with ``index_select``: a batch in torch's standard strides. A batch
    cut from numpy by fancy indexing can get a stride of 1 on a one-channel axis, which torch
    reads as channels-last: the convolutions then run another kernel, 20-25% faster for LeNet-5
    on MNIST here than the one every run gets, and a profile timed on it read the run fast."""
    return torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32))


class _Trainer:
    """A model, its loss and SGD optimizer, and random batches, for timing steps."""

    def __init__(self, model: nn.Module, cfg: ComputeConfig, input_shape: Sequence[int]) -> None:
        torch.manual_seed(0)
        self.model = model.to(cfg.device).train()
        self.cfg = cfg
        self.shape = tuple(input_shape)
        self.loss_fn = nn.CrossEntropyLoss()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=0.9)

    def batch(self, bs: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cfg.inputs is not None:
            rows = torch.from_numpy(np.resize(np.arange(len(self.cfg.inputs)), bs))  # cycled
            x = run_layout(self.cfg.inputs).index_select(0, rows).to(self.cfg.device)
        else:
            x = torch.randn(bs, *self.shape, device=self.cfg.device)
        y = torch.randint(0, self.cfg.num_classes, (bs,), device=self.cfg.device)
        return x, y

    def _sync(self) -> None:
        if self.cfg.device.startswith("cuda"):
            torch.cuda.synchronize()

    def plain_step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        self._sync()
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        self.loss_fn(self.model(x), y).backward()
        self.opt.step()
        self._sync()
        return time.perf_counter() - t0


def plain_step_s(
    model: nn.Module,
    input_shape: Sequence[int],
    batch: int,
    seconds: float,
    num_classes: int = 10,
) -> float:
    """The median seconds of ``model``'s plain training step (forward, loss, backward, SGD
    with momentum) at ``batch`` on random inputs, on the CPU, over ``seconds`` (at least 5
    steps, after 3 untimed): how fast this machine runs the model now."""
    cfg = ComputeConfig((batch,), num_classes=num_classes)
    tr = _Trainer(model, cfg, input_shape)
    x, y = tr.batch(batch)
    for _ in range(3):
        tr.plain_step(x, y)
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        times.append(tr.plain_step(x, y))
    return float(np.median(times))


def profile_compute(
    model: nn.Module,
    specs: list[LayerSpec],
    input_shape: Sequence[int],
    cfg: ComputeConfig,
    progress: Progress | None = None,
) -> ComputeProfile:
    """Measure ``model`` (built for ``input_shape``) whose layer specs are ``specs``."""
    tr = _Trainer(model, cfg, input_shape)
    phase = [""]
    done = 0

    def tick(what: str, of: int) -> None:
        """Count one run of the phase ``what`` (of ``of`` runs) for the progress bar."""
        nonlocal done
        done = done + 1 if what == phase[0] else 1
        phase[0] = what
        if progress is not None:
            progress(what, done, of)

    try:
        return _measure(tr, specs, cfg, tick)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise EdgetrainError(
            f"training step failed while profiling: {first}", "try smaller batch sizes"
        ) from None


def timed_runs(cfg: ComputeConfig, run_s: float) -> int:
    """How many timed runs: ``repeats``, or more to fill ``min_time_s`` (see the docstring)."""
    wanted = math.ceil(cfg.timed_s / run_s) if run_s > 0 else MAX_REPEATS
    return max(cfg.repeats, min(wanted, MAX_REPEATS))


def _measure(
    tr: _Trainer, specs: list[LayerSpec], cfg: ComputeConfig, tick: Callable[[str, int], None]
) -> ComputeProfile:
    timeline = LayerTimeline(tr.model, specs, cfg.device)
    first = cfg.batch_sizes[0]
    x, y = tr.batch(first)
    fwd, bwd, plain, hooked = [], [], [], []
    acts: list[int] = [0] * len(specs)
    pair_s = 0.0
    for _ in range(max(cfg.warmup, 1)):
        pair_s = timeline.step(x, y, tr.loss_fn, tr.opt).total_s + tr.plain_step(x, y)
    runs = timed_runs(cfg, pair_s)
    for _ in range(runs):
        st = timeline.step(x, y, tr.loss_fn, tr.opt)
        plain.append(tr.plain_step(x, y))
        tick(f"layers @ batch {first}", runs)
        fwd.append(st.fwd)
        bwd.append(st.bwd)
        hooked.append(st.total_s)
        acts = st.activation_bytes
    f, b = np.array(fwd), np.array(bwd)
    fast = _faster_half(np.array(hooked))
    fmed, bmed = f[fast].mean(0), b[fast].mean(0)
    fiqr, biqr = _iqr(f), _iqr(b)
    layers = tuple(
        LayerProfile(
            name=s.name,
            param_bytes=s.param_bytes,
            activation_bytes=int(acts[i]),
            fwd_s=float(fmed[i]),
            bwd_s=float(bmed[i]),
            fwd_iqr_s=float(fiqr[i]),
            bwd_iqr_s=float(biqr[i]),
        )
        for i, s in enumerate(specs)
    )
    step_by_bs = {first: estimate(plain)}
    peaks: dict[int, int] = {}
    source = ""
    for bs in cfg.batch_sizes:
        xb, yb = (x, y) if bs == first else tr.batch(bs)
        with peak_memory(cfg.device) as pm:
            t = tr.plain_step(xb, yb)
        peaks[bs], source = pm.bytes, pm.source
        if bs != first:
            for _ in range(cfg.warmup - 1):
                t = tr.plain_step(xb, yb)
            n = timed_runs(cfg, t)
            times = []
            for _ in range(n):
                times.append(tr.plain_step(xb, yb))
                tick(f"step @ batch {bs}", n)
            step_by_bs[bs] = estimate(times)
    return ComputeProfile(
        layers=layers,
        step_s=step_by_bs[first],
        step_iqr_s=float(_iqr(np.array(plain))),
        step_median_s=float(np.median(plain)),
        hooked_step_s=estimate(hooked),
        throughput={bs: bs / t for bs, t in step_by_bs.items()},
        step_s_by_batch=step_by_bs,
        peak_memory_bytes=peaks[first],
        peak_memory_by_batch=peaks,
        peak_memory_source=source,
        repeats=runs,
        warmup=cfg.warmup,
        quota=cfg.quota,
        sustained_step_s=estimate(plain, cfg.quota),
    )
