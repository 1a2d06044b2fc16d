"""GreedyUpdates: PipeDream's schedule with one weight copy, updated as soon as each backward
ends. Forward and backward both use the newest weights (the backward with activations saved
at an older version); no version is kept (``latest`` store)."""

from __future__ import annotations

from edgetrain.pipeline.roles import runner_for
from edgetrain.runtime.base import Runner, WorkerContext


def make_runner(ctx: WorkerContext) -> Runner:
    return runner_for(ctx, "greedy")
