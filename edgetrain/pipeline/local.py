"""Local: the whole model on one process, one SGD step per microbatch (the paper's baseline on
one laptop). The same stage executor with one stage and one copy of the weights, so a pipeline
with a window of one reproduces it bit for bit."""

from __future__ import annotations

from edgetrain.pipeline.roles import runner_for
from edgetrain.runtime.base import Runner, WorkerContext


def make_runner(ctx: WorkerContext) -> Runner:
    return runner_for(ctx, "local")
