"""What every pipeline process sets up: its threads, the allocator, the seeded model, the
microbatch and SGD settings, the resumed state, and the epoch-end snapshots it sends.

Shared by stages and replicas (:class:`TrainingProcess`), so every technique starts from the
same weights and draws the same microbatches from the same seed."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgetrain.comm.control import HandIn
from edgetrain.comm.rewind import Rewind
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import is_count
from edgetrain.data.dataset import Dataset
from edgetrain.errors import EdgetrainError
from edgetrain.pipeline import accounting, snapshots
from edgetrain.pipeline.chain import Unit, build_units
from edgetrain.pipeline.chunked import chunk_elems
from edgetrain.pipeline.config import PipelineSection
from edgetrain.pipeline.paused import PauseLedger
from edgetrain.pipeline.stage_build import Stage, make_stage
from edgetrain.pipeline.stage_channels import Links
from edgetrain.pipeline.stores import Hyper
from edgetrain.pipeline.table import UnitInfo, unit_table
from edgetrain.profile import scope
from edgetrain.profile.memory import reset_rss_peak, rss_bytes, rss_peak_bytes
from edgetrain.recipe import Recipe
from edgetrain.runtime import accelerator
from edgetrain.runtime.base import WorkerContext
from edgetrain.runtime.context import Roster
from edgetrain.runtime.rewind_watch import RewindWatch
from edgetrain.runtime.session import Session
from edgetrain.runtime.setup import build_run_model, load_run_data, seeded_model

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3


def set_mmap_threshold(nbytes: int | None) -> bool:
    """Fix glibc's mmap threshold (``MALLOC_MMAP_THRESHOLD_`` at run time): large freed
    buffers go back to the OS at once, so RSS follows what the store holds. False where
    mallopt is not available."""
    if nbytes is None:
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return False
    mallopt = getattr(libc, "mallopt", None)
    return bool(mallopt(_M_MMAP_THRESHOLD, int(nbytes))) if mallopt is not None else False


def start_process(ctx: WorkerContext) -> PipelineSection:
    """Threads from the worker group, the allocator setting; the ``[pipeline]`` section."""
    recipe = ctx.recipe
    torch.set_num_threads(recipe.expanded_workers()[ctx.worker_id].threads)
    cfg = PipelineSection.of(recipe)
    if cfg.mmap_threshold is not None and not set_mmap_threshold(cfg.mmap_threshold):
        log.warning("could not set the mmap threshold (no glibc mallopt)")
    return cfg


def hyper_of(recipe: Recipe) -> Hyper:
    t = recipe.train
    return Hyper(t.lr, t.momentum, t.weight_decay)


def microbatch_of(recipe: Recipe, cfg: PipelineSection) -> int:
    return cfg.microbatch or recipe.train.batch_size


def collect() -> None:
    """Free what the full model left behind (other stages' units)."""
    gc.collect()


def resumed_units(
    resume: HandIn | None,
    names: Sequence[Sequence[tuple[str, str]]],
    momentum: bool,
) -> tuple[list[dict[str, torch.Tensor]] | None, list[dict[str, torch.Tensor] | None] | None]:
    """A checkpoint's weights (and momentum) per unit, by state-dict names ``names[u]``."""
    if resume is None:
        return None, None
    weights: list[dict[str, torch.Tensor]] = []
    bufs: list[dict[str, torch.Tensor] | None] = []
    for unit_names in names:
        w: dict[str, torch.Tensor] = {}
        b: dict[str, torch.Tensor] = {}
        for local, state in unit_names:
            if state not in resume.weights:
                raise EdgetrainError(f"the checkpoint lacks {state}; it is not this partition's")
            w[local] = torch.from_numpy(np.array(resume.weights[state], dtype=np.float32))
            key = f"optim.{state}.momentum"
            if momentum and key in resume.weights:
                b[local] = torch.from_numpy(np.array(resume.weights[key], dtype=np.float32))
        weights.append(w)
        bufs.append(b if momentum and b else None)
    return weights, (bufs if momentum else None)


def restore_buffers(modules: Sequence[tuple[str, torch.Tensor]], arrays: Mapping[str, Any]) -> None:
    """Copy checkpointed buffers (running statistics) into the live ones."""
    with torch.no_grad():
        for state, buf in modules:
            if state in arrays:
                buf.copy_(torch.from_numpy(np.array(arrays[state])).reshape(buf.shape))


def unit_names(units: Sequence[Unit]) -> list[list[tuple[str, str]]]:
    """Per unit, (unit-local, state-dict) names of its parameters."""
    return [[(local, unit.state_name(local)) for local in unit.params()] for unit in units]


def unit_buffers(units: Sequence[Unit]) -> list[tuple[str, torch.Tensor]]:
    """(state-dict name, live tensor) of every floating buffer of the units."""
    return [
        (unit.state_name(local), b)
        for unit in units
        for local, b in unit.module.named_buffers()
        if b.is_floating_point()
    ]


def _count(value: Any) -> int:
    """A count from checkpoint metadata (0 when absent or malformed)."""
    return int(value) if is_count(value) else 0


def seeded_units(recipe: Recipe, input_shape: tuple[int, int, int], classes: int) -> list[Unit]:
    """The seeded model's units, as every process builds them at the start."""
    return build_units(seeded_model(recipe, input_shape, classes), recipe.model.name)


def training_tensors(data: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """The training split as contiguous float32 inputs and int64 labels."""
    xt = torch.from_numpy(np.ascontiguousarray(data.x_train, dtype=np.float32))
    yt = torch.from_numpy(np.ascontiguousarray(data.y_train, dtype=np.int64))
    return xt, yt


class TrainingProcess:
    """What a stage and a data-parallel replica share: the ``[pipeline]`` settings, the data
    and the model's units, the channels (serving the coordinator while they wait), the stage
    built from a checkpoint or the seed, the epoch loop, the snapshots, the memory figures."""

    cfg: PipelineSection
    device: torch.device  # where the units, their store and the microbatches' graphs live
    b: int  # the microbatch
    samples: int
    input_shape: tuple[int, ...]
    timers: accounting.Timers
    stage: Stage
    part: int  # this process's part of every snapshot, of ``parts``
    parts: int
    clock: float  # training seconds so far (snapshots left out)
    clock_now: float  # the training clock at the snapshot being sent
    rss_baseline: int | None
    rss_reset: bool
    cgroup: Path | None

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.links: Links | None = None
        self.session: Session | None = None
        self.snap_parts = 0
        self.snap_s = 0.0
        self.epoch_t0 = time.monotonic()  # the training clock has counted up to here
        self.cpu0 = time.process_time()  # reset when training begins
        self.quota_group: Path | None = None  # the CPU quota's group, found then
        self.quota_stat0: dict[str, float] | None = None
        self.paused = PauseLedger()  # waits on a neighbour's pause, out of the clock
        self.rewind = RewindWatch(str(ctx.role))  # a run that rewinds: lost peers halt it

    # ------------------------------------------------------------------ setting up

    def _start(self) -> tuple[Dataset, list[Unit], list[UnitInfo]]:
        """Threads and settings, the device (started now, in set-up), the data, the seeded
        model's units and their table, and the channels (no socket yet)."""
        ctx, recipe = self.ctx, self.ctx.recipe
        self.cfg = start_process(ctx)
        self.device = accelerator.start_device(recipe.train.device)
        self.b = microbatch_of(recipe, self.cfg)
        data = load_run_data(recipe)
        self.samples = len(data.x_train)
        self.input_shape = data.input_shape
        units = build_units(build_run_model(recipe, data), recipe.model.name)
        infos = unit_table(units, self.input_shape)
        self.timers = accounting.Timers()
        self.links = Links(Transport.of(ctx), self.timers, self.cfg.recv_timeout_s, self._serve)
        return data, units, infos

    def _build_stage(
        self,
        units: list[Unit],
        infos: Sequence[UnitInfo],
        technique: str,
        *,
        last: bool,
        input_shape: Sequence[int],
        store: str = "mixed",
        resume: HandIn | None = None,
        seeded: bool = False,
    ) -> Stage:
        """The stage of ``units``: from ``resume`` (default: the checkpoint when the run
        resumes), else seeded (``seeded``: seeded even where the run resumed)."""
        recipe = self.ctx.recipe
        resume = None if seeded else (resume if resume is not None else self.ctx.resume)
        version, init, mom = 0, None, None
        if resume is not None:
            version = int(resume.meta.get("version", 0))
            init, mom = resumed_units(resume, unit_names(units), recipe.train.momentum > 0)
            restore_buffers(unit_buffers(units), resume.weights)
        stage = make_stage(
            units, infos, technique, hyper_of(recipe), last=last, seed=recipe.run.seed,
            input_shape=input_shape, store=store, microbatch=self.b, version=version,
            init=init, momentum=mom, device=self.device,
            chunk=chunk_elems(self.cfg.chunk_mib), lowrank=self.cfg.replay == "lowrank",
            keep_rebuilt=self.cfg.mmap_threshold is None,
        )  # fmt: skip
        stage.store.timers = self.timers
        return stage

    def _connect_evaluator(self, session: Session) -> None:
        """An outbox to the evaluator, when the run has one."""
        assert self.links is not None
        evaluators = session.roster.of("evaluator")
        if evaluators:
            ev = evaluators[0]
            self.links.connect("snap", ev.endpoints["snap"], ev.id, 64)

    def _serve(self) -> None:
        if self.session is not None:
            self.session.poll()

    def close(self) -> None:
        if self.links is not None:
            self.links.close()

    # ------------------------------------------------------------------ training

    def _epoch(self, session: Session, epoch: int, steps: int) -> tuple[int, bool]:
        raise NotImplementedError

    def _train(self, session: Session) -> tuple[int, int]:
        """Every epoch from the start epoch (memory measured from here); the last epoch run and
        the steps."""
        accelerator.reset_memory_peaks(self.device)
        self.cpu0 = time.process_time()
        self.quota_group = scope.quota_group()
        self.quota_stat0 = scope.read_cpu_stat(self.quota_group)
        self.rss_baseline = rss_bytes()
        self.rss_reset = reset_rss_peak()
        self.cgroup = accounting.cgroup_memory_dir()
        accounting.reset_cgroup_peak(self.cgroup)
        self.clock = 0.0
        steps = 0
        first = session.rejoin_epoch or self.ctx.start_epoch
        if session.rejoin_epoch is not None and self.ctx.resume is not None:
            # a restarted process: the counts where its checkpoint left them
            steps = self._restore_counts(self.ctx.resume, clock=True)
        while True:
            try:
                return self._epochs(session, first, steps)
            except Rewind:  # a stage this one trains with was lost (a run that rewinds)
                first, steps = self._rewind(session)

    def _epochs(self, session: Session, first: int, steps: int) -> tuple[int, int]:
        """Epochs ``first`` to the last, then ``done``; the last epoch run and the steps."""
        last = self.ctx.recipe.train.epochs
        for epoch in range(first, last + 1):
            self.epoch_t0 = time.monotonic()
            steps, stop = self._epoch(session, epoch, steps)
            if stop:  # the time budget is spent, or the coordinator said stop
                last = epoch
                break
        session.done({"snapshot_parts": self.snap_parts}, last, steps)
        return last, steps

    # ------------------------------------------------------------------ rewinds

    def _rewind(self, session: Session) -> tuple[int, int]:
        """Halt where this process is; once the coordinator rewinds, reconnect to the lost
        peers' new processes and rebuild the stage from this process's part of the checkpoint
        (None: the seeded start). Returns the epoch to train next and the steps at the
        checkpoint."""
        t0 = self.epoch_t0
        log.info("%s: a peer was lost; halting for the rewind", self.ctx.role)
        units = self.stage.units
        del self.stage  # the microbatches in flight, their graphs and pairs go
        self._forget_in_flight()
        collect()
        rewound = self.rewind.halt(session)
        self._reconnect(rewound.roster)
        self.stage = self._rebuild(units, rewound.handin)
        collect()
        if rewound.handin is None:
            steps, self.snap_parts = 0, 0
        else:
            steps = self._restore_counts(rewound.handin, clock=False)
        lost = time.monotonic() - t0
        self.clock += lost  # the epoch thrown away and the wait count: the run lost them
        self.rewind.count(lost)
        log.info("%s: rewound to epoch %d (gen %d)", self.ctx.role, rewound.epoch, rewound.gen)
        return rewound.epoch + 1, steps

    @property
    def _gen(self) -> int:
        """This process's generation (the rewinds of the run so far), stamped on its messages."""
        return self.session.gen if self.session is not None else 0

    def _forget_in_flight(self) -> None:
        """Drop what a rewind throws away besides the stage (messages held for later)."""

    def _reconnect(self, roster: Roster) -> None:
        """Connect the outboxes whose peer came back at a new endpoint."""
        raise NotImplementedError

    def _rebuild(self, units: list[Unit], handin: HandIn | None) -> Stage:
        """This process's stage from its part of the checkpoint (None: the seeded start),
        ``units`` the modules to load it into."""
        raise NotImplementedError

    def _checkpoint_meta(self, steps: int) -> dict[str, Any]:
        """The counts a rewind or a restarted process takes up from a checkpoint."""
        return {"steps": steps, "snapshot_parts": self.snap_parts, "train_clock_s": self.clock}

    def _restore_counts(self, handin: HandIn, clock: bool) -> int:
        """The snapshot parts sent (and with ``clock``, the training clock) where ``handin``'s
        checkpoint was taken; returns its steps."""
        meta = handin.meta
        self.snap_parts = _count(meta.get("snapshot_parts"))
        if clock:
            t = meta.get("train_clock_s")
            if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t):
                self.clock = max(0.0, float(t))
            else:
                self.clock = 0.0
        return _count(meta.get("steps"))

    # ------------------------------------------------------------------ snapshots, figures

    def _has_evaluator(self) -> bool:
        return self.links is not None and "snap" in self.links.outboxes

    def _snapshot(self, epoch: int, absorbed: int, epoch_end: bool) -> None:
        """Send this process's newest weights, unit by unit, to the evaluator."""
        assert self.links is not None
        t0 = time.monotonic()
        self.snap_parts += snapshots.send(
            self.links, self.stage, self.part, self.parts, epoch, absorbed, self.clock_now,
            epoch_end,
        )  # fmt: skip
        self.snap_s += time.monotonic() - t0

    def _memory(self) -> dict[str, Any]:
        """The store's five figures, the process's RSS peak over its baseline, the cgroup's,
        and on an accelerator its peaks (allocated and reserved; absent on the CPU)."""
        figures = self.stage.store.acc.figures()
        rss_peak = rss_peak_bytes() if self.rss_reset else None
        return {
            **figures,
            "rss_baseline_bytes": self.rss_baseline,
            "rss_peak_bytes": rss_peak,
            "rss_delta_bytes": (rss_peak - self.rss_baseline)
            if rss_peak is not None and self.rss_baseline is not None
            else None,
            **accounting.cgroup_figures(self.cgroup),
            **accelerator.memory_figures(self.device),
        }

    def _timer_figures(self, forward_s: float, replay_s: float) -> dict[str, float]:
        t = self.timers
        return {
            "forward_s": forward_s,
            "replay_s": replay_s,
            "backward_s": t.get("backward_s"),
            "update_s": t.get("update_s"),
            "wait_s": t.get("wait_s"),
            "send_s": t.get("send_s"),
            "snapshot_s": self.snap_s,
            "held_s": self.paused.held_s,
            "compute_s": t.get("forward_s") + t.get("backward_s") + t.get("update_s"),
            # CPU seconds in the same blocks (a quota's waits left out)
            "replay_cpu_s": t.cpu_get("replay_s"),
            "compute_cpu_s": t.cpu_get("forward_s")
            + t.cpu_get("backward_s")
            + t.cpu_get("update_s"),
            # the whole process's CPU seconds since training began, every thread (ZeroMQ's I/O
            # threads, heartbeats, snapshots): beside compute_cpu_s, what moving the
            # microbatches costs on a host whose cores the stage shares with nothing else
            "process_cpu_s": time.process_time() - self.cpu0,
            # under a CPU quota (an emulated host, a container): the quota group's periods
            # since training began, the share that ran out of quota, and the seconds its
            # processes (this one and any beside it on the host) were stopped for
            **(
                scope.throttling_delta(self.quota_stat0, scope.read_cpu_stat(self.quota_group))
                or {}
            ),
        }

    def _clock_figures(self) -> dict[str, Any]:
        """The training clock, the snapshot parts sent, the channels' and the traffic figures."""
        return {
            "train_clock_s": self.clock,
            "snapshot_parts": self.snap_parts,
            "links": self.links.link_figures() if self.links is not None else {},
            **self.ctx.traffic.as_dict(),
        }
