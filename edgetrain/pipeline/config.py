"""The pipeline family's recipe section, ``[pipeline]`` (torch-free: recipes validate without
torch)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from edgetrain.section import Section


class PipelineSection(Section):
    """``[pipeline]``: microbatch, window, partition, mcPipe's store, snapshots, memory figures.

    The number of stages is the number of ``stage`` workers in the recipe (``replica`` workers
    for data parallelism)."""

    NAME: ClassVar[str] = "pipeline"

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    # b: samples per microbatch, the unit of update of every technique (one SGD step per
    # microbatch per stage). None: [train] batch_size.
    microbatch: int | None = Field(None, ge=1)
    # e: extra window depth; stage s of N keeps m_s = N - s + e microbatches in flight.
    window_extra: int = Field(0, ge=0, le=64)
    # Uniform window: every stage keeps this many in flight (1: no pipelining at all, every
    # schedule then equals Local SGD). None: the 1F1B window above.
    window: int | None = Field(None, ge=1, le=256)
    # At most this many microbatches per epoch (None: every full microbatch of the split).
    microbatches: int | None = Field(None, ge=1)
    # Where the cuts come from: a plan file written by `edgetrain plan --pipeline` (relative
    # to the run directory, e.g. "plans/pipeline.json"), units per stage ("split", e.g.
    # [3, 1]), or the exact min-max partitioner at launch with `objective`.
    plan: str | None = None
    split: list[int] | None = None
    objective: Literal["time", "params", "memory"] = "time"
    # mcPipe only: "mixed" keeps a unit that is not linear in its parameters as weight
    # versions; "pairs" refuses one; "auto" keeps pairs only where they are smaller than the
    # weights (reported as mcPipe-auto).
    store: Literal["mixed", "pairs", "auto"] = "mixed"
    # Snapshots for the accuracy curve: every this many microbatches (0: epoch ends only) the
    # stages send their newest weights to the evaluator, which scores them after the run.
    snapshot_every: int = Field(0, ge=0)
    # Memory runs: a fixed glibc mmap threshold in bytes (131072 makes freed versions and
    # pairs go back to the OS, so RSS follows the store); None leaves glibc's default.
    mmap_threshold: int | None = Field(None, ge=4096)
    # Seconds a stage waits for one activation or error before naming the stage it waits on.
    recv_timeout_s: float = Field(300.0, gt=0)
    # A training-time budget in seconds (None: train every epoch of [train] epochs): once the
    # training clock passes it, a pipeline (and Local) stops at the end of that epoch, and
    # data-parallel replicas stop after that step (they agree on it in their gradient
    # exchange), so arms with different speeds can be compared over the same time.
    budget_s: float | None = Field(None, gt=0)
    # Chunked unit kernels (memory runs): Linear and Conv layers compute their forward,
    # weight gradient and update (and mcPipe its newest weight) by output-row / channel
    # chunks of at most this many MiB of weights, in every schedule alike, so mcPipe's
    # transient is one chunk, not a unit's weights. 0: off (whole-layer kernels).
    chunk_mib: float = Field(0.0, ge=0, le=4096, allow_inf_nan=False)
    # mcPipe's replay of the pending updates for a forward: "sequential" rebuilds the newest
    # weight (bit-identical to PipeDream); "lowrank" (Linear layers, plain SGD) corrects the
    # base's output by the pending pairs without forming the weight: about b(in+out)/(in*out)
    # of the sequential replay's compute and no transient weight, close to but not bitwise
    # equal to PipeDream.
    replay: Literal["sequential", "lowrank"] = "sequential"

    @model_validator(mode="after")
    def _check(self) -> PipelineSection:
        if self.split is not None and (not self.split or any(k < 1 for k in self.split)):
            raise ValueError("split lists units per stage: positive counts, e.g. [3, 1]")
        if self.plan is not None and self.split is not None:
            raise ValueError("give plan or split, not both")
        return self
