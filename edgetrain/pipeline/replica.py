"""A data-parallel replica (role ``replica``): the whole model on a slice of every microbatch.

Replica r of R takes rows [r b/R, (r+1) b/R) of microbatch j (the same seeded microbatches Local
trains on), runs the same executor as a one-stage pipeline, turns its pairs into gradients with
the shared weight-gradient function, and sends them to every other replica. Each replica sums
all R gradients in replica order and divides by R, so every replica applies the same update
and stays bit-identical to the others; against Local it differs only in summation order. The
per-step payload is the whole model, which is what sinks data parallelism on slow links.

In a run that rewinds (``[run] restart``, :mod:`edgetrain.comm.rewind`), a lost replica halts
the others where they are, as a lost stage halts a pipeline: each takes its copy of the last
checkpoint (or the seeded start), reconnects to the lost replica's new process and trains the
epochs since again, every gradient stamped with the new generation.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from typing import Any

import torch

from edgetrain.comm import protocol
from edgetrain.comm.control import HandIn
from edgetrain.comm.rewind import GEN
from edgetrain.comm.wire import Message
from edgetrain.errors import Diverged
from edgetrain.pipeline import feed, messages
from edgetrain.pipeline.chain import Unit
from edgetrain.pipeline.proc import TrainingProcess, collect, seeded_units, training_tensors
from edgetrain.pipeline.stage_build import Stage, stage_momentum, stage_state
from edgetrain.pipeline.stores import unit_grads
from edgetrain.runtime.accelerator import from_host, to_host
from edgetrain.runtime.base import Final, Ready, WorkerContext
from edgetrain.runtime.context import Roster
from edgetrain.runtime.session import Session

log = logging.getLogger(__name__)


class ReplicaRunner(TrainingProcess):
    """One data-parallel replica."""

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(ctx)
        self.waiting: dict[str, deque[Message]] = {}
        self.connected: dict[int, str] = {}  # replica -> the endpoint its outbox is connected to

    def setup(self) -> Ready:
        self.r = self.ctx.role.index
        self.R = self.ctx.recipe.role_names().count("replica")
        self.part, self.parts = 0, 1  # replica 0 sends the whole model's snapshots
        data, self.units, self.infos = self._start()
        self.classes, self.data_shape = data.classes, data.input_shape
        self.xt, self.yt = training_tensors(data)
        assert self.links is not None
        endpoints = {}
        if self.R > 1:
            endpoints["grads"] = self.links.bind("grads", 4 * self.R, f"replica {self.r} inbox")
        return Ready(endpoints, {"samples": self.samples, "replica": self.r})

    def run(self, session: Session) -> Final:
        ctx = self.ctx
        self.session = session
        self.m = int(session.start_directive["microbatches"])
        self.stage = self._build_stage(
            self.units, self.infos, "dataparallel", last=True, input_shape=self.input_shape
        )
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
                self.connected[m.role.index] = m.endpoints["grads"]
                self.peers[m.role.index] = protocol.worker_name(m.id)
        if self.r == 0:
            self._connect_evaluator(session)
        self.rewind.watch(session, "replica")
        _, steps = self._train(session)
        meta = {"role": str(ctx.role), "replica": self.r, "version": self.stage.store.latest}
        return Final(HandIn(stage_state(self.stage), meta), {**self._metrics(), "steps": steps})

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
            x = self.xt.index_select(0, idx).to(self.device)  # x[idx], without its indexing cost
            y = self.yt.index_select(0, idx).to(self.device)
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
                and self._has_evaluator()
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
        if self.r == 0 and self._has_evaluator() and not (every and absorbed % every == 0):
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
                    "version": self.stage.store.latest, **self._checkpoint_meta(steps)}  # fmt: skip
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
            unit.state_name(k): to_host(g) for unit, gs in zip(units, grads, strict=True)
            for k, g in gs.items()
        }  # fmt: skip
        meta = {"epoch": epoch, "step": step, "over": over, GEN: self._gen}
        for r in sorted(self.peers):
            self.links.send(f"to{r}", messages.DP_GRAD, meta, mine, epoch, step)
        got: dict[int, Message] = {}
        names = {v: k for k, v in self.peers.items()}
        gen = self._gen
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
                lambda m: messages.gradients_problem(m, m.sender in names, self.shapes, gen),
                f"the gradients of step {step}",
                "the other replicas",
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
                        g = own if r == self.r else from_host(got[r].tensors[name], self.device)
                        total = g.clone() if total is None else total.add_(g)
                    assert total is not None
                    summed[k] = total.div_(self.R)
                out.append(summed)
        return out, over or any(m.meta.get("over") is True for m in got.values())

    # ------------------------------------------------------------------ rewinds

    def _forget_in_flight(self) -> None:
        self.waiting.clear()  # gradients of steps the rewind throws away

    def _reconnect(self, roster: Roster) -> None:
        """Connect the outboxes to the replicas that came back at a new endpoint."""
        assert self.links is not None
        for m in roster.of("replica"):
            endpoint = m.endpoints.get("grads")
            r = m.role.index
            if r in self.connected and endpoint and endpoint != self.connected[r]:
                self.links.reconnect(f"to{r}", endpoint, m.id, 4)
                self.connected[r] = endpoint

    def _rebuild(self, units: list[Unit], handin: HandIn | None) -> Stage:
        """The whole model from this replica's copy of the checkpoint, or from the seed."""
        seeded = handin is None
        if seeded:
            units = seeded_units(self.ctx.recipe, self.data_shape, self.classes)
        return self._build_stage(
            units, self.infos, "dataparallel", last=True, input_shape=self.input_shape,
            resume=handin, seeded=seeded,
        )  # fmt: skip

    # ------------------------------------------------------------------ reports

    def _metrics(self) -> dict[str, Any]:
        return {
            "technique": "dataparallel",
            "device": str(self.device),
            "role_name": "replica",
            "role_index": self.r,
            "replicas": self.R,
            "units": [u.name for u in self.stage.units],
            "store_modes": self.stage.choice.modes,
            "microbatch": self.b,
            "version": self.stage.store.latest,
            "rewinds": self.rewind.rewinds,
            "rewound_s": self.rewind.rewound_s,
            "memory": self._memory(),
            "timers": self._timer_figures(self.timers.get("forward_s"), 0.0),
            **self._clock_figures(),
        }
