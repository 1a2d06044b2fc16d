"""A data-parallel replica (role ``replica``): the whole model on a slice of every microbatch.

Replica r of R takes rows [r b/R, (r+1) b/R) of microbatch j (the same seeded microbatches Local
trains on), runs the same executor as a one-stage pipeline, turns its pairs into gradients with
the shared weight-gradient function, and sends them to every other replica. Each replica sums
all R gradients in replica order and divides by R, so every replica applies the same update
and stays bit-identical to the others; against Local it differs only in summation order. The
per-step payload is the whole model, which is what sinks data parallelism on slow links.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from typing import Any

import numpy as np
import torch

from edgetrain.comm import protocol
from edgetrain.comm.control import HandIn
from edgetrain.comm.wire import Message
from edgetrain.errors import Diverged
from edgetrain.pipeline import accounting, feed, messages, snapshots
from edgetrain.pipeline.build import make_stage, stage_momentum, stage_state
from edgetrain.pipeline.chain import build_units
from edgetrain.pipeline.links import Links
from edgetrain.pipeline.proc import (
    collect,
    hyper_of,
    microbatch_of,
    restore_buffers,
    resumed_units,
    start_process,
)
from edgetrain.pipeline.stage import unit_buffers, unit_names
from edgetrain.pipeline.stores import unit_grads
from edgetrain.pipeline.table import unit_table
from edgetrain.runtime.base import Final, Ready, WorkerContext
from edgetrain.runtime.session import Session
from edgetrain.runtime.setup import build_run_model, load_run_data

log = logging.getLogger(__name__)


class ReplicaRunner:
    """One data-parallel replica."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.links: Links | None = None
        self.session: Session | None = None
        self.waiting: dict[str, deque[Message]] = {}
        self.snap_parts = 0
        self.snap_s = 0.0

    def setup(self) -> Ready:
        ctx, recipe = self.ctx, self.ctx.recipe
        self.cfg = start_process(ctx)
        self.r = ctx.role.index
        self.R = recipe.role_names().count("replica")
        self.b = microbatch_of(recipe, self.cfg)
        data = load_run_data(recipe)
        self.samples = len(data.x_train)
        self.input_shape = data.input_shape
        self.xt = torch.from_numpy(np.ascontiguousarray(data.x_train, dtype=np.float32))
        self.yt = torch.from_numpy(np.ascontiguousarray(data.y_train, dtype=np.int64))
        model = build_run_model(recipe, data)
        self.units = build_units(model, recipe.model.name)
        self.infos = unit_table(self.units, self.input_shape)
        self.timers = accounting.Timers()
        self.links = Links(
            ctx.zmq, ctx.run_id, ctx.worker_id, ctx.traffic, ctx.keys, self.timers,
            self.cfg.recv_timeout_s, self._serve,
        )  # fmt: skip
        endpoints = {}
        if self.R > 1:
            endpoints["grads"] = self.links.bind(
                "grads", ctx.bind_host, ctx.announce_host, 4 * self.R, f"replica {self.r} inbox"
            )
        return Ready(endpoints, {"samples": self.samples, "replica": self.r})

    def _serve(self) -> None:
        if self.session is not None:
            self.session.poll()

    def run(self, session: Session) -> Final:
        ctx, recipe = self.ctx, self.ctx.recipe
        self.session = session
        self.m = int(session.start_directive["microbatches"])
        units = self.units
        version, init, mom = 0, None, None
        if ctx.resume is not None:
            version = int(ctx.resume.meta.get("version", 0))
            init, mom = resumed_units(ctx.resume, unit_names(units), recipe.train.momentum > 0)
            restore_buffers(unit_buffers(units), ctx.resume.weights)
        self.stage = make_stage(
            units, self.infos, "dataparallel", hyper_of(recipe), last=True,
            seed=recipe.run.seed, input_shape=self.input_shape, microbatch=self.b,
            version=version, init=init, momentum=mom,
        )  # fmt: skip
        self.stage.store.timers = self.timers
        collect()
        self.shapes = {
            unit.state_name(k): tuple(t.shape)
            for u, unit in enumerate(self.stage.units)
            for k, t in self.stage.store.newest(u).items()
        }
        self.peers: dict[int, str] = {}
        assert self.links is not None
        for m in session.roster.of("replica"):
            if m.role.index != self.r:
                self.links.connect(f"to{m.role.index}", m.endpoints["grads"], m.id, 4)
                self.peers[m.role.index] = protocol.worker_name(m.id)
        evaluators = session.roster.of("evaluator")
        if evaluators and self.r == 0:
            ev = evaluators[0]
            self.links.connect("snap", ev.endpoints["snap"], ev.id, 64)
        self.rss_baseline = accounting.rss_bytes()
        self.rss_reset = accounting.reset_rss_peak()
        self.cgroup = accounting.cgroup_memory_dir()
        accounting.reset_cgroup_peak(self.cgroup)
        self.clock = 0.0
        steps = 0
        last = recipe.train.epochs
        for epoch in range(ctx.start_epoch, recipe.train.epochs + 1):
            steps, stop = self._epoch(session, epoch, steps)
            if stop:  # the time budget is spent
                last = epoch
                break
        session.done({"snapshot_parts": self.snap_parts}, last, steps)
        meta = {"role": str(ctx.role), "replica": self.r, "version": self.stage.store.latest}
        return Final(HandIn(stage_state(self.stage), meta), {**self._metrics(), "steps": steps})

    def close(self) -> None:
        if self.links is not None:
            self.links.close()

    # ------------------------------------------------------------------ one epoch

    def _epoch(self, session: Session, epoch: int, steps: int) -> tuple[int, bool]:
        """One epoch's steps (fewer once the time budget is spent: every replica stops after
        the same step); the steps so far, and whether to stop."""
        recipe = self.ctx.recipe
        started = time.monotonic()
        snap_before = self.snap_s
        batches = feed.epoch_order(
            self.samples, self.b, recipe.run.seed, epoch, self.cfg.microbatches
        )
        losses: list[float] = []
        correct = seen = done = 0
        over = False
        budget = self.cfg.budget_s
        for j, full in enumerate(batches):
            session.poll()
            idx = torch.from_numpy(feed.replica_slice(full, self.r, self.R))
            x, y = self.xt[idx], self.yt[idx]
            ex = self.stage.executor
            with self.timers.time("forward_s"):
                ex.forward(epoch, j, x, y)
            micro = ex.flight[-1]
            loss = micro.loss if micro.loss is not None else math.nan
            if not math.isfinite(loss):
                raise Diverged(epoch, j + 1, self.ctx.worker_id)
            losses.append(loss)
            correct += micro.correct
            seen += len(y)
            with self.timers.time("backward_s"):
                _, micro = ex.backward(None)
            store = self.stage.store
            with self.timers.time("update_s"):
                grads = [
                    unit_grads(unit, micro.calls[u], store.forward_weights(u, micro.version))
                    for u, unit in enumerate(self.stage.units)
                ]
            micro.calls = []
            store.release(micro.version)
            clock = self.clock + time.monotonic() - started - (self.snap_s - snap_before)
            mine = budget is not None and clock >= budget
            total, over = self._allreduce(epoch, steps + j + 1, grads, mine)
            store.apply_grads(total)
            ex.sample()
            done = j + 1
            session.progress(epoch, done, steps + done, loss=loss)
            absorbed = (epoch - 1) * self.m + done
            end = done == len(batches) or over
            if (
                self.r == 0
                and self._snapshots()
                and self.cfg.snapshot_every
                and (absorbed % self.cfg.snapshot_every == 0)
            ):
                self.clock_now = (
                    self.clock + time.monotonic() - started - (self.snap_s - snap_before)
                )
                self._snapshot(epoch, absorbed, end)
            if over:
                break
        epoch_s = time.monotonic() - started - (self.snap_s - snap_before)
        self.clock += epoch_s
        steps += done
        t0 = time.monotonic()
        absorbed = (epoch - 1) * self.m + done
        every = self.cfg.snapshot_every
        if self.r == 0 and self._snapshots() and not (every and absorbed % every == 0):
            self.clock_now = self.clock
            self._snapshot(epoch, absorbed, True)
        metrics = {
            **self._metrics(),
            "loss": sum(losses) / len(losses) if losses else None,
            "train_accuracy": correct / seen if seen else None,
            "epoch_steps": done,
            "steps": steps,
            "epoch_s": epoch_s,
            "eval_s": time.monotonic() - t0,
            "train_clock_s": self.clock,
        }
        if session.checkpoint_due(epoch):
            weights = {**stage_state(self.stage), **stage_momentum(self.stage)}
            meta = {"role": str(self.ctx.role), "replica": self.r,
                    "version": self.stage.store.latest}  # fmt: skip
            session.checkpoint(epoch, steps, HandIn(weights, meta))
        go = session.end_epoch(epoch, steps, metrics, last=epoch == recipe.train.epochs)
        return steps, over or bool(go.get("stop"))

    def _allreduce(
        self, epoch: int, step: int, grads: list[dict[str, torch.Tensor]], over: bool
    ) -> tuple[list[dict[str, torch.Tensor]], bool]:
        """Every replica's gradients, summed in replica order, over R; and whether any replica
        has spent the time budget (``over``: this one), the same answer at every replica."""
        if self.R == 1:
            return grads, over
        assert self.links is not None
        units = self.stage.units
        mine = {
            unit.state_name(k): g.numpy() for unit, gs in zip(units, grads, strict=True)
            for k, g in gs.items()
        }  # fmt: skip
        meta = {"epoch": epoch, "step": step, "over": over}
        for r in sorted(self.peers):
            self.links.send(f"to{r}", messages.DP_GRAD, meta, mine, epoch, step)
        got: dict[int, Message] = {}
        names = {v: k for k, v in self.peers.items()}
        while len(got) < len(self.peers):
            for sender, queue in self.waiting.items():
                r = names[sender]
                if queue and r not in got:
                    msg = queue.popleft()
                    if (msg.meta["epoch"], msg.meta["step"]) != (epoch, step):
                        raise messages.OutOfOrder(
                            f"replica {self.r} waited for step {step} (epoch {epoch}) from "
                            f"replica {r} but got step {msg.meta['step']}"
                        )
                    got[r] = msg
            if len(got) == len(self.peers):
                break
            msg = self.links.receive(
                "grads",
                (messages.DP_GRAD,),
                lambda m: messages.gradients_problem(m, m.sender in names, self.shapes),
                f"the gradients of step {step} from the other replicas",
            )
            self.waiting.setdefault(msg.sender, deque()).append(msg)
        with self.timers.time("update_s"):
            out = []
            for unit, gs in zip(units, grads, strict=True):
                summed = {}
                for k, own in gs.items():
                    name = unit.state_name(k)
                    total = None
                    for r in range(self.R):
                        g = own if r == self.r else torch.from_numpy(np.array(got[r].tensors[name]))
                        total = g.clone() if total is None else total.add_(g)
                    assert total is not None
                    summed[k] = total.div_(self.R)
                out.append(summed)
        return out, over or any(m.meta.get("over") is True for m in got.values())

    # ------------------------------------------------------------------ snapshots, reports

    def _snapshots(self) -> bool:
        return self.links is not None and "snap" in self.links.outboxes

    def _snapshot(self, epoch: int, absorbed: int, epoch_end: bool) -> None:
        assert self.links is not None
        t0 = time.monotonic()
        self.snap_parts += snapshots.send(
            self.links, self.stage, 0, 1, epoch, absorbed, self.clock_now, epoch_end
        )
        self.snap_s += time.monotonic() - t0

    def _metrics(self) -> dict[str, Any]:
        figures = self.stage.store.acc.figures()
        rss_peak = accounting.rss_peak_bytes() if self.rss_reset else None
        memory = {
            **figures,
            "rss_baseline_bytes": self.rss_baseline,
            "rss_peak_bytes": rss_peak,
            "rss_delta_bytes": (rss_peak - self.rss_baseline)
            if rss_peak is not None and self.rss_baseline is not None
            else None,
            **accounting.cgroup_figures(self.cgroup),
        }
        t = self.timers
        return {
            "technique": "dataparallel",
            "role_name": "replica",
            "role_index": self.r,
            "replicas": self.R,
            "units": [u.name for u in self.stage.units],
            "store_modes": self.stage.choice.modes,
            "microbatch": self.b,
            "version": self.stage.store.latest,
            "memory": memory,
            "timers": {
                "forward_s": t.get("forward_s"),
                "replay_s": 0.0,
                "backward_s": t.get("backward_s"),
                "update_s": t.get("update_s"),
                "wait_s": t.get("wait_s"),
                "send_s": t.get("send_s"),
                "snapshot_s": self.snap_s,
                "compute_s": t.get("forward_s") + t.get("backward_s") + t.get("update_s"),
            },
            "train_clock_s": self.clock,
            "snapshot_parts": self.snap_parts,
            "links": self.links.link_figures() if self.links is not None else {},
            **self.ctx.traffic.as_dict(),
        }
