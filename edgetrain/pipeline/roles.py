"""Which runner a pipeline process runs: its role's, with its technique's weight store."""

from __future__ import annotations

from edgetrain.runtime.base import Runner, WorkerContext


def runner_for(ctx: WorkerContext) -> Runner:
    """The evaluator, a data-parallel replica, or a stage keeping weights the way the recipe's
    technique declares (its module's ``STORE``)."""
    if ctx.role.name == "evaluator":
        from edgetrain.pipeline.evaluator import Evaluator

        return Evaluator(ctx)
    if ctx.role.name == "replica":
        from edgetrain.pipeline.replica import ReplicaRunner

        return ReplicaRunner(ctx)
    from edgetrain.pipeline.stage import StageRunner

    return StageRunner(ctx, ctx.recipe.train.technique)


class RewindingRunners:
    """A pipeline technique's runner factory: :func:`runner_for`, and a lost worker of
    ``roles``' restarted process rejoins the running run by rewinding every training process
    to the last checkpoint (:mod:`edgetrain.comm.rewind`)."""

    rejoins = True

    def __init__(self, *roles: str) -> None:
        self.restarts_roles = frozenset(roles)

    def __call__(self, ctx: WorkerContext) -> Runner:
        return runner_for(ctx)


staged_runner = RewindingRunners("stage")  # Local, PipeDream, GreedyUpdates, mcPipe
replica_runner = RewindingRunners("replica")  # data parallelism
