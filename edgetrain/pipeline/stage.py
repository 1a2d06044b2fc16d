"""A pipeline stage process (role ``stage``): Local, PipeDream, GreedyUpdates and mcPipe.

It builds the seeded model, keeps its units (from the ``start`` directive), and runs its fixed
operation order every epoch: a forward takes microbatch j from the data (stage 0) or from the
stage before, a backward takes the error from the stage after (the last stage computes the
loss itself). Activations travel with their labels; every received message is checked against
the operation that needs it. The technique decides only how the store keeps the weights. At
each epoch's end the pipeline has drained: every stage is at its newest version, its snapshot
goes to the evaluator, its checkpoint (when due) to the coordinator. The memory figures and
timers go out with each epoch's report and the final hand-in.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from edgetrain.comm.control import HandIn
from edgetrain.errors import Diverged, EdgetrainError
from edgetrain.pipeline import accounting, feed, messages, schedule, snapshots
from edgetrain.pipeline.bounds import UnitSize, paper_bound, resident
from edgetrain.pipeline.build import Stage, make_stage, stage_momentum, stage_state
from edgetrain.pipeline.chain import Unit, build_units
from edgetrain.pipeline.links import Links, to_tensor
from edgetrain.pipeline.proc import (
    collect,
    hyper_of,
    microbatch_of,
    restore_buffers,
    resumed_units,
    start_process,
)
from edgetrain.pipeline.table import UnitInfo, unit_table
from edgetrain.runtime.base import Final, Ready, WorkerContext
from edgetrain.runtime.session import Session
from edgetrain.runtime.setup import build_run_model, load_run_data

log = logging.getLogger(__name__)


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


class StageRunner:
    """One stage of a pipeline (or the whole model for Local)."""

    def __init__(self, ctx: WorkerContext, technique: str) -> None:
        self.ctx = ctx
        self.technique = technique
        self.links: Links | None = None
        self.session: Session | None = None
        self.snap_parts = 0
        self.snap_s = 0.0
        self.losses: list[float] = []
        self.correct = 0
        self.seen = 0

    # ------------------------------------------------------------------ runner

    def setup(self) -> Ready:
        ctx, recipe = self.ctx, self.ctx.recipe
        self.cfg = start_process(ctx)
        self.s = ctx.role.index
        self.n = recipe.role_names().count("stage")
        self.last = self.s == self.n - 1
        self.b = microbatch_of(recipe, self.cfg)
        data = load_run_data(recipe)
        self.samples = len(data.x_train)
        self.classes = data.classes
        self.input_shape = data.input_shape
        model = build_run_model(recipe, data)
        # The chain and its table now, so that `start` finds the stage ready to cut.
        self.all_units: list[Unit] | None = build_units(model, recipe.model.name)
        self.infos_all: list[UnitInfo] = unit_table(self.all_units, self.input_shape)
        if self.s == 0:
            self.xt = torch.from_numpy(np.ascontiguousarray(data.x_train, dtype=np.float32))
            self.yt = torch.from_numpy(np.ascontiguousarray(data.y_train, dtype=np.int64))
        del data
        self.timers = accounting.Timers()
        self.links = Links(
            ctx.zmq, ctx.run_id, ctx.worker_id, ctx.traffic, ctx.keys, self.timers,
            self.cfg.recv_timeout_s, self._serve,
        )  # fmt: skip
        hwm = schedule.in_flight(0, self.n, self.cfg.window_extra, self.cfg.window) + 1
        endpoints = {}
        if self.s > 0:
            endpoints["act"] = self.links.bind(
                "act", ctx.bind_host, ctx.announce_host, hwm, f"activation inbox of stage {self.s}"
            )
        if not self.last:
            endpoints["grad"] = self.links.bind(
                "grad", ctx.bind_host, ctx.announce_host, hwm, f"error inbox of stage {self.s}"
            )
        return Ready(endpoints, {"samples": self.samples, "stage": self.s})

    def run(self, session: Session) -> Final:
        ctx, recipe = self.ctx, self.ctx.recipe
        self.session = session
        d = session.start_directive
        bounds = [(int(b[0]), int(b[1])) for b in d.get("bounds", [])]
        if len(bounds) != self.n:
            raise EdgetrainError(f"stage {self.s}: the start directive has no partition")
        self.bounds = bounds
        self.m = int(d["microbatches"])
        self._build(bounds[self.s])
        self._connect(session)
        self.rss_baseline = accounting.rss_bytes()
        self.rss_reset = accounting.reset_rss_peak()
        self.cgroup = accounting.cgroup_memory_dir()
        accounting.reset_cgroup_peak(self.cgroup)
        self.clock = 0.0
        steps = 0
        epochs = last = recipe.train.epochs
        for epoch in range(ctx.start_epoch, epochs + 1):
            steps, stop = self._epoch(session, epoch, steps)
            if stop:  # the time budget is spent
                last = epoch
                break
        session.done({"snapshot_parts": self.snap_parts}, last, steps)
        weights = stage_state(self.stage)
        meta = self._handin_meta()
        metrics = {**self._metrics(final=True), "steps": steps}
        return Final(HandIn(weights, meta), metrics)

    def close(self) -> None:
        if self.links is not None:
            self.links.close()

    def _serve(self) -> None:
        if self.session is not None:
            self.session.poll()

    # ------------------------------------------------------------------ building

    def _build(self, bounds: tuple[int, int]) -> None:
        recipe, ctx = self.ctx.recipe, self.ctx
        assert self.all_units is not None
        lo, hi = bounds
        units = self.all_units[lo:hi]
        self.infos = self.infos_all[lo:hi]
        version = 0
        init = mom = None
        if ctx.resume is not None:
            got = [tuple(b) for b in ctx.resume.meta.get("bounds", [])]
            if got != [tuple(b) for b in self.bounds]:
                raise EdgetrainError(
                    f"stage {self.s}: the checkpoint was cut as {got}, this run as {self.bounds}",
                    "resume with the partition the run was started with",
                )
            version = int(ctx.resume.meta.get("version", 0))
            init, mom = resumed_units(ctx.resume, unit_names(units), recipe.train.momentum > 0)
            restore_buffers(unit_buffers(units), ctx.resume.weights)
        self.stage: Stage = make_stage(
            units, self.infos, self.technique, hyper_of(recipe), last=self.last,
            seed=recipe.run.seed, input_shape=self.infos[0].in_shape, store=self.cfg.store,
            microbatch=self.b, version=version, init=init, momentum=mom,
        )  # fmt: skip
        self.stage.store.timers = self.timers
        self.all_units = None  # the other stages' units go
        collect()
        self.act_shape = (self.b, *self.infos[0].in_shape)
        self.out_shape = (self.b, *self.infos[-1].out_shape)

    def _connect(self, session: Session) -> None:
        assert self.links is not None
        members = {m.role.index: m for m in session.roster.of("stage")}
        hwm = schedule.in_flight(0, self.n, self.cfg.window_extra, self.cfg.window) + 1
        self.prev = self.next = None
        if self.s > 0:
            prev = members[self.s - 1]
            self.links.connect("grad", prev.endpoints["grad"], prev.id, hwm)
            self.prev = f"w{prev.id}"
        if not self.last:
            nxt = members[self.s + 1]
            self.links.connect("act", nxt.endpoints["act"], nxt.id, hwm)
            self.next = f"w{nxt.id}"
        evaluators = session.roster.of("evaluator")
        if evaluators:
            ev = evaluators[0]
            self.links.connect("snap", ev.endpoints["snap"], ev.id, 64)

    # ------------------------------------------------------------------ one epoch

    def _epoch(self, session: Session, epoch: int, steps: int) -> tuple[int, bool]:
        """One epoch's operations; the steps so far, and whether the coordinator said stop."""
        ctx = self.ctx
        cfg = self.cfg
        started = time.monotonic()
        snap_before = self.snap_s
        batches = (
            feed.epoch_order(self.samples, self.b, ctx.recipe.run.seed, epoch, cfg.microbatches)
            if self.s == 0
            else []
        )
        self.losses, self.correct, self.seen = [], 0, 0
        ops = schedule.order(self.s, self.n, self.m, cfg.window_extra, cfg.window)
        done = 0
        for op in ops:
            session.poll()
            if op.kind == "F":
                self._forward(epoch, op.mb, batches)
            else:
                self._backward(epoch, op.mb)
                done += 1
                absorbed = (epoch - 1) * self.m + op.mb + 1
                if snapshots.due(absorbed, cfg.snapshot_every) and self._has_evaluator():
                    self.clock_now = (
                        self.clock + (time.monotonic() - started) - (self.snap_s - snap_before)
                    )
                    self._snapshot(epoch, absorbed, epoch_end=op.mb == self.m - 1)
            self.stage.executor.sample()
            session.progress(
                epoch, done, steps + done, loss=self.losses[-1] if self.losses else 0.0
            )
        epoch_s = time.monotonic() - started - (self.snap_s - snap_before)
        self.clock += epoch_s
        steps += done
        t0 = time.monotonic()
        absorbed = epoch * self.m
        periodic = snapshots.due(absorbed, cfg.snapshot_every)
        if self._has_evaluator() and not periodic:
            self.clock_now = self.clock
            self._snapshot(epoch, absorbed, epoch_end=True)
        eval_s = time.monotonic() - t0
        metrics = {
            **self._metrics(final=False),
            "loss": sum(self.losses) / len(self.losses) if self.losses else None,
            "train_accuracy": self.correct / self.seen if self.seen else None,
            "epoch_steps": done,
            "steps": steps,
            "epoch_s": epoch_s,
            "eval_s": eval_s,
            "train_clock_s": self.clock,
        }
        if session.checkpoint_due(epoch):
            session.checkpoint(epoch, steps, self._checkpoint())
        go = session.end_epoch(epoch, steps, metrics, last=epoch == ctx.recipe.train.epochs)
        return steps, bool(go.get("stop"))

    def _forward(self, epoch: int, j: int, batches: list[np.ndarray]) -> None:
        assert self.links is not None
        if self.s == 0:
            idx = torch.from_numpy(batches[j])
            x, y = self.xt[idx], self.yt[idx]
        else:
            expect = messages.Expect(
                messages.ACT, self.prev or "", epoch, j, self.act_shape, self.classes
            )
            msg = self.links.receive(
                "act", (messages.ACT,), lambda m: messages.problem(m, expect), expect.what()
            )
            messages.check_order(msg, expect, f"stage {self.s}")
            x, y = to_tensor(msg.tensors["act"]), to_tensor(msg.tensors["labels"])
        with self.timers.time("forward_s"):
            out = self.stage.executor.forward(epoch, j, x, y if self.last else None)
        if self.last:
            micro = self.stage.executor.flight[-1]
            loss = micro.loss if micro.loss is not None else math.nan
            if not math.isfinite(loss):
                raise Diverged(epoch, j + 1, self.ctx.worker_id)
            self.losses.append(loss)
            self.correct += micro.correct
            self.seen += len(y)
            return
        meta = {"epoch": epoch, "mb": j, "version": self.stage.executor.flight[-1].version}
        self.links.send(
            "act", messages.ACT, meta, {"act": out.numpy(), "labels": y.numpy()}, epoch, j
        )

    def _backward(self, epoch: int, j: int) -> None:
        assert self.links is not None
        grad = None
        if not self.last:
            expect = messages.Expect(messages.GRAD, self.next or "", epoch, j, self.out_shape)
            msg = self.links.receive(
                "grad", (messages.GRAD,), lambda m: messages.problem(m, expect), expect.what()
            )
            messages.check_order(msg, expect, f"stage {self.s}")
            grad = to_tensor(msg.tensors["grad"])
        ex = self.stage.executor
        if ex.flight[0].j != j:
            raise messages.OutOfOrder(f"stage {self.s}: backward {j} is not the oldest in flight")
        with self.timers.time("backward_s"):
            dx, micro = ex.backward(grad)
        self.stage.store.end_backward(micro.version, micro.calls)
        micro.calls = []
        if self.s > 0:
            assert dx is not None
            self.links.send("grad", messages.GRAD, {"epoch": epoch, "mb": j},
                            {"grad": dx.numpy()}, epoch, j)  # fmt: skip

    # ------------------------------------------------------------------ snapshots

    def _has_evaluator(self) -> bool:
        return self.links is not None and "snap" in self.links.outboxes

    def _snapshot(self, epoch: int, absorbed: int, epoch_end: bool) -> None:
        """Send this stage's newest weights, unit by unit, to the evaluator."""
        assert self.links is not None
        t0 = time.monotonic()
        self.snap_parts += snapshots.send(
            self.links, self.stage, self.s, self.n, epoch, absorbed, self.clock_now, epoch_end
        )
        self.snap_s += time.monotonic() - t0

    # ------------------------------------------------------------------ reports

    def _handin_meta(self) -> dict[str, Any]:
        return {
            "role": str(self.ctx.role),
            "stage": self.s,
            "bounds": [list(b) for b in self.bounds],
            "version": self.stage.store.latest,
        }

    def _checkpoint(self) -> HandIn:
        weights = {**stage_state(self.stage), **stage_momentum(self.stage)}
        return HandIn(weights, self._handin_meta())

    def _metrics(self, final: bool) -> dict[str, Any]:
        store = self.stage.store
        figures = store.acc.figures()
        rss_peak = accounting.rss_peak_bytes() if self.rss_reset else None
        memory: dict[str, Any] = {
            **figures,
            "rss_baseline_bytes": self.rss_baseline,
            "rss_peak_bytes": rss_peak,
            "rss_delta_bytes": (rss_peak - self.rss_baseline)
            if rss_peak is not None and self.rss_baseline is not None
            else None,
            **accounting.cgroup_figures(self.cgroup),
        }
        t = self.timers
        compute = t.get("forward_s") + t.get("backward_s") + t.get("update_s")
        out: dict[str, Any] = {
            "technique": self.technique,
            "role_name": "stage",
            "role_index": self.s,
            "stages": self.n,
            "units": [u.name for u in self.stage.units],
            "bounds": [list(b) for b in self.bounds],
            "store_modes": self.stage.choice.modes,
            "microbatch": self.b,
            "m": schedule.in_flight(self.s, self.n, self.cfg.window_extra, self.cfg.window),
            "version": store.latest,
            "memory": memory,
            "formulas": self._formulas(),
            "timers": {
                "forward_s": t.get("forward_s") - t.get("replay_s"),
                "replay_s": t.get("replay_s"),
                "backward_s": t.get("backward_s"),
                "update_s": t.get("update_s"),
                "wait_s": t.get("wait_s"),
                "send_s": t.get("send_s"),
                "snapshot_s": self.snap_s,
                "compute_s": compute,
            },
            "train_clock_s": self.clock,
            "snapshot_parts": self.snap_parts,
            "links": self.links.link_figures() if self.links is not None else {},
            **self.ctx.traffic.as_dict(),
        }
        return out

    def _formulas(self) -> dict[str, Any]:
        """The specification's closed forms for this stage, beside the measured figures."""
        m = schedule.in_flight(self.s, self.n, self.cfg.window_extra, self.cfg.window)
        sizes = [UnitSize(u.params, u.pair_elems) for u in self.infos]
        momentum = self.ctx.recipe.train.momentum > 0
        omega = sum(u.params for u in self.infos_all)
        params = sum(u.params for u in self.infos)
        return {
            "m": m,
            "params": params,
            "pair_elems": sum(u.pair_elems for u in self.infos),
            "resident_bytes": resident(
                "latest", m, sizes, self.b, momentum, modes=self.stage.choice.modes
            ),
            "pipedream_bytes": resident("versions", m, sizes, self.b, momentum),
            "mcpipe_bytes": resident("pairs", m, sizes, self.b, momentum),
            "greedy_bytes": resident("latest", m, sizes, self.b, momentum),
            "paper_bound_bytes": paper_bound(omega, self.n, m),
            "paper_stash_bytes": 4.0 * m * omega / self.n,
        }
