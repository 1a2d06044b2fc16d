"""The pipeline family's own kernels, timed: one microbatch's forward, backward and update of the
whole model as one Local stage (the executor and store every schedule runs), on this device.

``edgetrain profile`` times autograd training steps (a fresh gradient buffer per step, the
optimiser's momentum), which the other families run; a pipeline stage runs its own unit
kernels (errors only through autograd, explicit weight gradients into kept buffers), which on
an FC-heavy MLP took half the time of the profiled step. The cost model keeps the profile's
split over layers and scales it to this measured step
(:func:`~edgetrain.runtime.setting_build.sustained_scale`: the profile's ``kernels.pipeline``).

The runs and estimators are the profiler's (:mod:`edgetrain.profile.compute`, the same
:class:`~edgetrain.profile.compute.ComputeConfig`): the mean of the faster half of the runs
(``step_s``, the burst pace under a CPU quota) and, under a quota, the mean of all runs spanning
at least :data:`~edgetrain.profile.compute.QUOTA_PERIODS` periods (``sustained_step_s``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from edgetrain.profile.compute import ComputeConfig, estimate, timed_runs

#: what the timed update does: plain SGD, as the reproductions' pipeline recipes train
TIMED_LR = 0.01
TIMED_MOMENTUM = 0.0


def time_local(
    model_name: str,
    input_shape: tuple[int, int, int],
    classes: int,
    cfg: ComputeConfig,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Time Local microbatches of ``cfg``'s first batch size, as many as the profiler times its
    steps, after its warm-up: a profile's ``kernels.pipeline``."""
    import torch

    from edgetrain.models import build_model
    from edgetrain.pipeline.chain import build_units
    from edgetrain.pipeline.stage_build import cut, make_stage
    from edgetrain.pipeline.stores import Hyper
    from edgetrain.pipeline.table import unit_table

    microbatch = cfg.batch_sizes[0]
    torch.manual_seed(0)
    model = build_model(model_name, input_shape, classes, dict(options or {}))
    n = len(build_units(model, model_name))
    units = cut(model, model_name, (0, n))
    infos = unit_table(units, tuple(input_shape))
    stage = make_stage(
        units, infos, "local", Hyper(TIMED_LR, TIMED_MOMENTUM), last=True, seed=0,
        input_shape=infos[0].in_shape, microbatch=microbatch,
    )  # fmt: skip
    x = torch.randn(microbatch, *input_shape)
    y = torch.randint(0, classes, (microbatch,))
    j = 0

    def one() -> float:
        nonlocal j
        t0 = time.perf_counter()
        stage.executor.forward(1, j, x, y)
        stage.executor.step(None)
        stage.executor.sample()
        j += 1
        return time.perf_counter() - t0

    first = 0.0
    for _ in range(max(cfg.warmup, 1)):
        first = one()
    runs = timed_runs(cfg, first)
    times = [one() for _ in range(runs)]
    stage.executor.close()
    return {
        "batch": int(microbatch),
        "units": n,
        "step_s": estimate(times),
        "sustained_step_s": estimate(times, cfg.quota),
        "runs": runs,
        "lr": TIMED_LR,
        "momentum": TIMED_MOMENTUM,
    }
