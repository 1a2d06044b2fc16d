"""A pipeline stage process (role ``stage``): Local, PipeDream, GreedyUpdates and mcPipe.

It builds the seeded model, keeps its units (from the ``start`` directive), and runs its fixed
operation order every epoch: a forward takes microbatch j from the data (stage 0) or from the
stage before, a backward takes the error from the stage after (the last stage computes the
loss itself). Activations travel with their labels; every received message is checked against
the operation that needs it. The technique decides only how the store keeps the weights. At
each epoch's end the pipeline has drained: every stage is at its newest version, its snapshot
goes to the evaluator, its checkpoint (when due) to the coordinator. The memory figures and
timers go out with each epoch's report and the final hand-in.

In a run that rewinds (``[run] restart``, :mod:`edgetrain.comm.rewind`), a lost stage halts
the others where they are; each then takes its part of the last checkpoint from the
coordinator (or its seeded start), reconnects to the lost stage's new process and trains the
epochs since again, every message stamped with the new generation.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
import torch

from edgetrain.comm.control import HandIn
from edgetrain.comm.rewind import GEN
from edgetrain.errors import Diverged, EdgetrainError
from edgetrain.pipeline import feed, messages, schedule, snapshots
from edgetrain.pipeline.bounds import UnitSize, paper_bound, resident, transient
from edgetrain.pipeline.chain import Unit
from edgetrain.pipeline.proc import TrainingProcess, collect, seeded_units, training_tensors
from edgetrain.pipeline.stage_build import Stage, stage_momentum, stage_state
from edgetrain.pipeline.stage_channels import to_tensor
from edgetrain.pipeline.table import UnitInfo
from edgetrain.runtime.accelerator import from_host, to_host
from edgetrain.runtime.base import Final, Ready, WorkerContext
from edgetrain.runtime.context import Roster
from edgetrain.runtime.session import Session

log = logging.getLogger(__name__)


class StageRunner(TrainingProcess):
    """One stage of a pipeline (or the whole model for Local)."""

    def __init__(self, ctx: WorkerContext, technique: str) -> None:
        super().__init__(ctx)
        self.technique = technique
        self.losses: list[float] = []
        self.correct = 0
        self.seen = 0
        self.connected: dict[str, str] = {}  # outbox -> the endpoint it is connected to

    # ------------------------------------------------------------------ runner

    def setup(self) -> Ready:
        recipe = self.ctx.recipe
        self.s = self.part = self.ctx.role.index
        self.n = self.parts = recipe.role_names().count("stage")
        self.last = self.s == self.n - 1
        data, units, infos = self._start()
        self.classes = data.classes
        self.data_shape = data.input_shape
        # The chain and its table now, so that `start` finds the stage ready to cut.
        self.all_units: list[Unit] | None = units
        self.infos_all: list[UnitInfo] = infos
        if self.s == 0:
            self.xt, self.yt = training_tensors(data)
        del data
        assert self.links is not None
        hwm = schedule.in_flight(0, self.n, self.cfg.window_extra, self.cfg.window) + 1
        endpoints = {}
        if self.s > 0:
            endpoints["act"] = self.links.bind("act", hwm, f"activation inbox of stage {self.s}")
        if not self.last:
            endpoints["grad"] = self.links.bind("grad", hwm, f"error inbox of stage {self.s}")
        return Ready(endpoints, {"samples": self.samples, "stage": self.s})

    def run(self, session: Session) -> Final:
        self.session = session
        d = session.start_directive
        bounds = [(int(b[0]), int(b[1])) for b in d.get("bounds", [])]
        if len(bounds) != self.n:
            raise EdgetrainError(f"stage {self.s}: the start directive has no partition")
        self.bounds = bounds
        self.m = int(d["microbatches"])
        self._build(bounds[self.s])
        self._connect(session)
        self.rewind.watch(session, "stage")
        _, steps = self._train(session)
        weights = stage_state(self.stage)
        meta = self._handin_meta()
        metrics = {**self._metrics(final=True), "steps": steps}
        return Final(HandIn(weights, meta), metrics)

    # ------------------------------------------------------------------ building

    def _build(self, bounds: tuple[int, int]) -> None:
        resume = self.ctx.resume
        assert self.all_units is not None
        lo, hi = bounds
        units = self.all_units[lo:hi]
        self.infos = self.infos_all[lo:hi]
        if resume is not None:
            got = [tuple(b) for b in resume.meta.get("bounds", [])]
            if got != [tuple(b) for b in self.bounds]:
                raise EdgetrainError(
                    f"stage {self.s}: the checkpoint was cut as {got}, this run as {self.bounds}",
                    "resume with the partition the run was started with",
                )
        self.stage = self._build_stage(
            units, self.infos, self.technique, last=self.last,
            input_shape=self.infos[0].in_shape, store=self.cfg.store,
        )  # fmt: skip
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
            self.connected["grad"] = prev.endpoints["grad"]
            self.prev = f"w{prev.id}"
        if not self.last:
            nxt = members[self.s + 1]
            self.links.connect("act", nxt.endpoints["act"], nxt.id, hwm)
            self.connected["act"] = nxt.endpoints["act"]
            self.next = f"w{nxt.id}"
        self._connect_evaluator(session)

    # ------------------------------------------------------------------ rewinds

    def _rebuild(self, units: list[Unit], handin: HandIn | None) -> Stage:
        """This stage from its part of the checkpoint, or from the seed (``handin`` None)."""
        seeded = handin is None
        if seeded:
            lo, hi = self.bounds[self.s]
            units = seeded_units(self.ctx.recipe, self.data_shape, self.classes)[lo:hi]
        return self._build_stage(
            units, self.infos, self.technique, last=self.last,
            input_shape=self.infos[0].in_shape, store=self.cfg.store,
            resume=handin, seeded=seeded,
        )  # fmt: skip

    def _reconnect(self, roster: Roster) -> None:
        """Connect the outboxes whose peer came back at a new endpoint."""
        assert self.links is not None
        members = {m.role.index: m for m in roster.of("stage")}
        hwm = schedule.in_flight(0, self.n, self.cfg.window_extra, self.cfg.window) + 1
        for name, index, inbox in (("grad", self.s - 1, "grad"), ("act", self.s + 1, "act")):
            member = members.get(index)
            if name not in self.connected or member is None:
                continue
            endpoint = member.endpoints.get(inbox)
            if endpoint and endpoint != self.connected[name]:
                self.links.reconnect(name, endpoint, member.id, hwm)
                self.connected[name] = endpoint

    # ------------------------------------------------------------------ one epoch

    def _epoch(self, session: Session, epoch: int, steps: int) -> tuple[int, bool]:
        """One epoch's operations; the steps so far, and whether the coordinator said stop."""
        ctx = self.ctx
        cfg = self.cfg
        started = time.monotonic()
        snap_before = self._out_of_clock_s()
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
                        self.clock
                        + (time.monotonic() - started)
                        - (self._out_of_clock_s() - snap_before)
                    )
                    self._snapshot(epoch, absorbed, epoch_end=op.mb == self.m - 1)
            self.stage.executor.sample()
            # only the last stage computes a loss: the others report none
            loss = {"loss": self.losses[-1]} if self.losses else {}
            session.progress(epoch, done, steps + done, **loss)
        epoch_s = time.monotonic() - started - (self._out_of_clock_s() - snap_before)
        self.clock += epoch_s
        self.epoch_t0 = time.monotonic()  # counted up to here (a rewind counts from here)
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
            session.checkpoint(epoch, steps, self._checkpoint(steps))
        go = session.end_epoch(epoch, steps, metrics, last=epoch == ctx.recipe.train.epochs)
        return steps, bool(go.get("stop"))

    def _forward(self, epoch: int, j: int, batches: list[np.ndarray]) -> None:
        assert self.links is not None
        if self.s == 0:
            idx = torch.from_numpy(batches[j])  # index_select: x[idx] without its indexing cost
            x, y = self.xt.index_select(0, idx).to(self.device), self.yt.index_select(0, idx)
        else:
            expect = messages.Expect(
                messages.ACT, self.prev or "", epoch, j, self.act_shape, self.classes, self._gen
            )
            msg = self.links.receive(
                "act",
                (messages.ACT,),
                lambda m: messages.problem(m, expect),
                expect.what(),
                f"stage {self.s - 1}",
            )
            messages.check_order(msg, expect, f"stage {self.s}")
            self._held(msg.sender, msg.meta.get("paused_s"), self.links.last_wait_s)
            x = from_host(msg.tensors["act"], self.device)
            y = to_tensor(msg.tensors["labels"])  # on the host: they travel on
        with self.timers.time("forward_s"):
            labels = y.to(self.device) if self.last else None
            out = self.stage.executor.forward(epoch, j, x, labels)
        if self.last:
            micro = self.stage.executor.flight[-1]
            loss = micro.loss if micro.loss is not None else math.nan
            if not math.isfinite(loss):
                raise Diverged(epoch, j + 1, self.ctx.worker_id)
            self.losses.append(loss)
            self.correct += micro.correct
            self.seen += len(y)
            return
        meta = {
            "epoch": epoch,
            "mb": j,
            GEN: self._gen,
            "version": self.stage.executor.flight[-1].version,
            "paused_s": self._out_of_clock_s(),
        }
        self.links.send(
            "act", messages.ACT, meta, {"act": to_host(out), "labels": y.numpy()}, epoch, j
        )

    def _backward(self, epoch: int, j: int) -> None:
        assert self.links is not None
        grad = None
        if not self.last:
            expect = messages.Expect(
                messages.GRAD, self.next or "", epoch, j, self.out_shape, gen=self._gen
            )
            msg = self.links.receive(
                "grad",
                (messages.GRAD,),
                lambda m: messages.problem(m, expect),
                expect.what(),
                f"stage {self.s + 1}",
            )
            messages.check_order(msg, expect, f"stage {self.s}")
            self._held(msg.sender, msg.meta.get("paused_s"), self.links.last_wait_s)
            grad = from_host(msg.tensors["grad"], self.device)
        ex = self.stage.executor
        if ex.flight[0].j != j:
            raise messages.OutOfOrder(f"stage {self.s}: backward {j} is not the oldest in flight")
        with self.timers.time("backward_s"):
            dx, micro = ex.backward(grad)
        self.stage.store.end_backward(micro.version, micro.calls)
        micro.calls = []
        if self.s > 0:
            assert dx is not None
            meta = {"epoch": epoch, "mb": j, GEN: self._gen, "paused_s": self._out_of_clock_s()}
            self.links.send("grad", messages.GRAD, meta, {"grad": to_host(dx)}, epoch, j)

    def _out_of_clock_s(self) -> float:
        """Seconds out of this stage's training clock so far: its snapshots, and its waits on
        a neighbour's (:mod:`edgetrain.pipeline.paused`)."""
        return self.snap_s + self.paused.held_s

    def _held(self, sender: str, paused: Any, waited: float) -> None:
        """Take the part of a wait that the sender's pause caused out of the bubble."""
        held = self.paused.attribute(sender, paused, waited)
        if held:
            self.timers.add("wait_s", -held)

    # ------------------------------------------------------------------ reports

    def _handin_meta(self) -> dict[str, Any]:
        return {
            "role": str(self.ctx.role),
            "stage": self.s,
            "bounds": [list(b) for b in self.bounds],
            "version": self.stage.store.latest,
        }

    def _checkpoint(self, steps: int) -> HandIn:
        """Weights and momentum, with the counts a rewind or a restarted process takes up."""
        weights = {**stage_state(self.stage), **stage_momentum(self.stage)}
        return HandIn(weights, {**self._handin_meta(), **self._checkpoint_meta(steps)})

    def _metrics(self, final: bool) -> dict[str, Any]:
        store = self.stage.store
        t = self.timers
        out: dict[str, Any] = {
            "technique": self.technique,
            "device": str(self.device),
            "role_name": "stage",
            "role_index": self.s,
            "stages": self.n,
            "units": [u.name for u in self.stage.units],
            "bounds": [list(b) for b in self.bounds],
            "store_modes": self.stage.choice.modes,
            "microbatch": self.b,
            "m": schedule.in_flight(self.s, self.n, self.cfg.window_extra, self.cfg.window),
            "version": store.latest,
            "rewinds": self.rewind.rewinds,
            "rewound_s": self.rewind.rewound_s,
            "memory": self._memory(),
            "formulas": self._formulas(),
            "timers": self._timer_figures(
                t.get("forward_s") - t.get("replay_s"), t.get("replay_s")
            ),
            **self._clock_figures(),
        }
        return out

    def _formulas(self) -> dict[str, Any]:
        """The specification's closed forms for this stage, beside the measured figures."""
        m = schedule.in_flight(self.s, self.n, self.cfg.window_extra, self.cfg.window)
        sizes = [UnitSize(u.params, u.pair_elems) for u in self.infos]
        momentum = self.ctx.recipe.train.momentum > 0
        omega = sum(u.params for u in self.infos_all)
        params = sum(u.params for u in self.infos)
        store = self.stage.store
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
            # the largest temporary the store's kernels hold (chunked: one chunk of each)
            "chunk_elems": store.chunk_elems,
            "transient_bound_bytes": transient(
                "pairs" if "pairs" in store.modes else "latest",
                sizes,
                momentum,
                fused=all(store.fused),
                chunk=store.chunk_elems,
            ),  # fmt: skip
        }
