"""Data-parallel: R replicas of the whole model, each on 1/R of every microbatch, gradients
summed over ZeroMQ in replica order (the paper's "data-distributed" baseline); the step is the
same as Local's up to summation order (:mod:`edgetrain.pipeline.replica`)."""

from __future__ import annotations

from edgetrain.pipeline.roles import runner_for
from edgetrain.runtime.base import Runner, WorkerContext


def make_runner(ctx: WorkerContext) -> Runner:
    return runner_for(ctx, "dataparallel")
