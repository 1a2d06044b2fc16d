"""The parameter-server family's recipe section, ``[ps]`` (torch-free)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator

from edgetrain.plan.units import parse_bandwidth
from edgetrain.section import Section


class PsSection(Section):
    """``[ps]``: where the cuts come from, when to re-plan, consistency, emulated round trip."""

    NAME: ClassVar[str] = "ps"

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    # A plan written by `edgetrain plan` into the run directory (relative to it, e.g.
    # "plans/jetson.json"): the technique's cuts for the first epoch. Without one the first
    # iteration goes layer by layer and the trainer plans from what it measured.
    plan: str | None = None
    # A plan file made for several bandwidths is used at the entry nearest this rate
    # ("100mbit", "12.5MBps"); unset, each trainer measures its link at start and takes the
    # entry nearest what it measured. Either way the worker log and the report say which.
    plan_bandwidth: str | None = None
    # Re-plan from live measurements at every epoch barrier ("epoch") or never; with
    # replan_every = N also every N iterations inside an epoch.
    replan: Literal["epoch", "never"] = "epoch"
    replan_every: int | None = Field(None, ge=1)
    # Transmissions (each direction) the link fit looks back over.
    fit_window: int = Field(200, ge=4)
    # bsp: a server applies a tensor's update once every live trainer pushed it, summing in
    # trainer order (the weights cannot depend on timing); ssp: pushes apply as they come and a
    # pull waits only while it is more than `staleness` iterations ahead.
    consistency: Literal["bsp", "ssp"] = "bsp"
    staleness: int = Field(2, ge=0)
    # Emulated round trip: a server handles each request half this long after it arrived and
    # sends each reply half this long after making it, every message on its own timer (never a
    # sleep): pipelined requests sent together come back together, one round trip later, and
    # others are served meanwhile. Recorded as emulated in the report.
    hold_ms: float = Field(0.0, ge=0, le=10_000)
    # Without a plan file, ibatch and dynacomm run this many layer-by-layer iterations first and
    # plan from what they measured (the link fit then sees every layer's size).
    cold_start_iterations: int = Field(3, ge=1)
    # Seconds a trainer waits for one reply before naming the server as the problem.
    reply_timeout_s: float = Field(120.0, gt=0)
    # Keep freed receive buffers in each trainer's and shard's heap (glibc mallopt), so pulled
    # parameters and pushed gradients land in warm memory instead of fresh pages: a pull of
    # VGG-16 on loopback took 3.5x less time (scripts/bench_transport). The memory kept is
    # bounded by twice the model's bytes (at least 64 MiB, at most 1 GiB); false returns freed
    # buffers to the OS at once.
    keep_buffers: bool = True
    # While trainers are away (lost, or gone and not yet rejoined), each update is the mean over
    # fewer trainers: "scaled" (default) takes the learning rate down to live / all trainers
    # for it (the linear scaling rule), "same" keeps [train] lr. With recipes/dynacomm.toml a
    # trainer left alone at the full rate fell to chance (benchmarks/chaos/).
    survivor_lr: Literal["scaled", "same"] = "scaled"

    @field_validator("plan_bandwidth")
    @classmethod
    def _rate(cls, v: str | None) -> str | None:
        if v is not None:
            parse_bandwidth(v)  # a ValueError names the problem and the fix
        return v
