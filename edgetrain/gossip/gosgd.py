"""GoSGD: local SGD steps; after a step, with probability p, push weights and half of alpha to a
random peer, which merges them (ALGORITHMS.md section 2, the baseline).

The worker side only: the run protocol (epochs, barriers, checkpoints, hand-ins) is the shared
:func:`~edgetrain.runtime.epochs.run_epochs`; drain accounting and the averaged model are the
family's (:mod:`edgetrain.gossip.family`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
import zmq

from edgetrain.comm import protocol
from edgetrain.comm.client import Serve
from edgetrain.comm.control import HandIn
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Message, arrays_from_state
from edgetrain.gossip.config import GossipSection
from edgetrain.gossip.mixing import check_compatible, merge_into
from edgetrain.gossip.node import GOSSIP, GossipNode, NodeHolder
from edgetrain.gossip.rejoin import (
    FETCH,
    MIN_FETCH_WAIT_S,
    MODEL,
    REJOIN_TYPES,
    Donor,
    ask_order,
    fetch_model,
)
from edgetrain.runtime.base import Final, Ready, WorkerContext, meta_float
from edgetrain.runtime.epochs import run_epochs
from edgetrain.runtime.session import Session
from edgetrain.runtime.setup import build_run_model, load_run_data, worker_indices
from edgetrain.runtime.snapshots import Snapshots
from edgetrain.runtime.trainer import LocalTrainer, resolve_device
from edgetrain.runtime.weights import float_state, load_arrays, state_arrays

log = logging.getLogger(__name__)


class GoSGD(NodeHolder):
    """One GoSGD worker (role ``trainer``)."""

    # A restarted process of it can rejoin a running run (``[run] restart``, gossip.rejoin).
    rejoins = True
    joins_new = True  # a new worker takes half a peer's alpha, as a rejoining one does

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.cfg = GossipSection.of(ctx.recipe)
        self.alpha = 1.0 / ctx.recipe.num_workers
        self.rng = np.random.default_rng(
            [ctx.recipe.run.seed, ctx.worker_id, 0x90551, ctx.start_epoch]
        )
        self.merged = 0
        self.pushed = 0
        self.excluded: set[int] = set()  # failed peers: never gossip with them again
        self.node: GossipNode | None = None
        self.trainer: LocalTrainer
        self.donor = Donor()  # rejoined peers asking for the model
        self.rejoin_report: dict[str, Any] | None = None  # reported with the first epoch
        self.first_step_at: float | None = None  # wall clock of its first step, reported once
        self._first_reported = False

    # ------------------------------------------------------------------ runner

    def setup(self) -> Ready:
        ctx = self.ctx
        recipe = ctx.recipe
        group = recipe.expanded_workers()[ctx.worker_id]
        torch.set_num_threads(group.threads)
        data = load_run_data(recipe)
        mine = worker_indices(recipe, data, ctx.worker_id)
        self.trainer = LocalTrainer(
            build_run_model(recipe, data),
            data.x_train[mine],
            data.y_train[mine],
            data.x_test,
            data.y_test,
            recipe.train,
            recipe.run.seed,
            ctx.worker_id,
            group.slowdown,
            resolve_device(recipe.train.device),
        )
        # Float entries of the state dict share storage with the model: merging updates it.
        self.state = float_state(self.trainer.model)
        if ctx.resume is not None:
            load_arrays(self.state, ctx.resume.weights, self.trainer.optimizer)
            self.alpha = meta_float(ctx.resume, "alpha", ctx.worker_id)
            log.info("resuming after epoch %d with alpha %.4f", ctx.resume_epoch, self.alpha)
        log.info(
            "%d training samples, model %s on %s, slowdown %.2f",
            len(mine),
            recipe.model.name,
            self.trainer.device,
            group.slowdown,
        )
        self.node = GossipNode(
            Transport.of(ctx),
            send_hwm=self.cfg.outbox,
            keep_buffers=self.cfg.keep_buffers,
            types=(GOSSIP, *REJOIN_TYPES),
            uncounted=REJOIN_TYPES,
        )
        meta = {
            "samples": self.trainer.num_samples,
            "steps_per_epoch": self.trainer.steps_per_epoch,
        }
        return Ready({"gossip": self.node.endpoint}, meta)

    def run(self, session: Session) -> Final:
        node = self._node
        node.connect(session.roster.endpoints("trainer", "gossip"))
        node.expect(self.ctx.recipe.ids_of("trainer"))  # open slots' new workers too
        session.on_failed(self.excluded.update)
        session.on_joined(self._peer_joined)
        recipe = self.ctx.recipe
        if session.rejoin_epoch is not None:
            self._rejoin(session)
        steps = run_epochs(
            session,
            self,
            epochs=recipe.train.epochs,
            start_epoch=session.rejoin_epoch or self.ctx.start_epoch,
            eval_every=recipe.train.eval_every,
            worker_id=self.ctx.worker_id,
            snapshots=self._snapshots(),
        )
        sent = {str(k): v for k, v in node.sent.items()}
        drain = session.done({"sent": sent}, recipe.train.epochs, steps, self.serve())
        expect = self._drain(session, drain)
        acc, loss = self.trainer.evaluate()
        metrics = {
            "final_test_accuracy": acc,
            "final_test_loss": loss,
            "steps": self.trainer.steps,
            "alpha": self.alpha,
            "gossip_sent": self.pushed,
            "gossip_merged": self.merged,
            "gossip_expected": expect,
            **node.traffic.as_dict(),
        }
        handin = HandIn(arrays_from_state(self.state), {"alpha": self.alpha})
        return Final(handin, metrics)

    # ------------------------------------------------------------------ rejoin

    def _rejoin(self, session: Session) -> None:
        """This process replaces a lost one: take the current model from a live peer."""
        node = self._node
        ctx = self.ctx
        live = [p for p in node.peers if p not in session.failed]
        wait_s = max(MIN_FETCH_WAIT_S, 3 * ctx.recipe.run.heartbeat_s)
        report, alpha = fetch_model(
            node,
            ask_order(live, ctx.worker_id, ctx.recipe.num_workers),
            self.state,
            self.trainer.optimizer,
            wait_s,
            session.poll,
            self._take,
        )
        if alpha is not None:
            self.alpha = alpha
        else:
            report["source"] = "checkpoint" if ctx.resume is not None else "initial"
        report["epoch"] = session.rejoin_epoch
        self.rejoin_report = report
        log.info("rejoined at epoch %s with the model from %s", session.rejoin_epoch, report)

    def _peer_joined(self, joined: Mapping[int, Mapping[str, str]]) -> None:
        """Peers that rejoined: gossip with their new processes, answer their asks."""
        node = self._node
        for peer, endpoints in joined.items():
            url = endpoints.get("gossip")
            if peer == self.ctx.worker_id or not url:
                continue
            node.reconnect(peer, url)
            self.excluded.discard(peer)
            self.donor.known.add(peer)
        self.alpha = self.donor.answer(node, self.state, self.trainer.optimizer, self.alpha)

    # ------------------------------------------------------------------ gossip

    def absorb(self) -> None:
        """Merge every valid message waiting in the inbox (and answer rejoined peers)."""
        for msg in self._node.receive_all():
            self._take(msg)
        if self.donor.asked:
            self.alpha = self.donor.answer(
                self._node, self.state, self.trainer.optimizer, self.alpha
            )

    def _take(self, msg: Message) -> None:
        """Merge one received message; note a rejoined peer's ask for the model."""
        node = self._node
        if msg.type == FETCH:
            self.donor.asked.add(node.peer_ids[msg.sender])
            return
        if msg.type == MODEL:  # an answer nobody here waits for
            node.traffic.drop("unasked_model", msg.sender)
            return
        alpha = msg.meta.get("alpha")
        reason = check_compatible(self.state, msg.tensors, alpha)
        if reason is not None:
            node.traffic.drop(reason, msg.sender)
            return
        assert isinstance(alpha, (int, float))  # check_compatible made sure
        self.alpha = merge_into(self.state, self.alpha, msg.tensors, float(alpha))
        self.merged += 1

    def maybe_push(self, epoch: int, step: int) -> None:
        node = self._node
        peers = [p for p in node.peers if p not in self.excluded]
        if not peers or self.rng.random() >= self.cfg.probability:
            return
        target = peers[int(self.rng.integers(len(peers)))]
        if not node.has_room(target):  # a full outbox: no snapshot, the alpha stays here
            return
        half = self.alpha / 2.0
        msg = Message(
            GOSSIP,
            node.name,
            node.run_id,
            step,
            epoch,
            {"alpha": half},
            arrays_from_state(self.state),
        )
        if node.send(target, msg):
            self.alpha = half
            self.pushed += 1

    def _missing(self, expect_from: Mapping[str, int]) -> int:
        got = self._node.received_from
        return sum(max(0, n - got[protocol.worker_name(int(p))]) for p, n in expect_from.items())

    def _drain(self, session: Session, directive: Mapping[str, Any]) -> int:
        """Merge until every message the live peers sent here has arrived (or the timeout).

        A drain directive sent again (a peer failed meanwhile) replaces the expectations."""
        expect_from = expectations(directive.get("expect_from"))
        seen = session.drain_updates
        deadline = time.monotonic() + self.cfg.drain_timeout_s
        while self._missing(expect_from) and time.monotonic() < deadline:
            if self._node.inbox.poll(200, zmq.POLLIN):
                self.absorb()
            session.poll()
            if session.drain_updates != seen and session.drain_directive is not None:
                seen = session.drain_updates
                expect_from = expectations(session.drain_directive.get("expect_from"))
        expect = sum(expect_from.values())
        if missing := self._missing(expect_from):
            log.warning("drain: %d of %d gossip messages never arrived", missing, expect)
        return expect

    # ------------------------------------------------------------------ EpochWork

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.trainer.batches(epoch)

    def step(self, epoch: int, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        if self.first_step_at is None:
            self.first_step_at = time.time()
        self.absorb()
        loss = self.trainer.step(*batch)
        self.maybe_push(epoch, self.trainer.steps)
        return loss

    def evaluate(self) -> tuple[float, float]:
        return self.trainer.evaluate()

    def _snapshots(self) -> Snapshots | None:
        """Epoch-end copies scored after training (``[train] eval_deferred``), or None."""
        if not self.ctx.recipe.train.eval_deferred:
            return None
        return Snapshots(self.trainer.model, self.evaluate)

    def metrics(self) -> dict[str, Any]:
        t = self.trainer
        return {
            "samples": t.num_samples,
            "compute_s": t.times.compute_s,
            "sleep_s": t.times.sleep_s,
            "alpha": self.alpha,
            "gossip_sent": self.pushed,
            "gossip_merged": self.merged,
            **self._node.traffic.as_dict(),
            **self._once(),
        }

    def _once(self) -> dict[str, Any]:
        """What an epoch's report carries once: the wall clock of the first step, how this
        process rejoined, and the models it served to rejoined peers since the last report."""
        out: dict[str, Any] = {}
        if self.first_step_at is not None and not self._first_reported:
            out["first_step_at"] = self.first_step_at
            self._first_reported = True
        if self.rejoin_report is not None:
            out["rejoin"], self.rejoin_report = self.rejoin_report, None
        if served := self.donor.report():
            out["models_served"] = served
        return out

    def checkpoint(self) -> HandIn:
        return HandIn(state_arrays(self.state, self.trainer.optimizer), {"alpha": self.alpha})

    def apply(self, directive: Mapping[str, Any]) -> None:
        return None

    def serve(self) -> Serve:
        return [(self._node.inbox, self.absorb)]


def expectations(value: Any) -> dict[str, int]:
    """``drain``'s per-sender message counts, with anything malformed left out."""
    if not isinstance(value, dict):
        return {}
    return {
        str(k): v
        for k, v in value.items()
        if str(k).isdigit() and isinstance(v, int) and not isinstance(v, bool) and v >= 0
    }
