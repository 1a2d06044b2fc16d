"""GoSGD: local SGD steps; after a step, with probability p, push weights and half of alpha to a
random peer, which merges them (ALGORITHMS.md section 2, the baseline)."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import zmq

from edgetrain.comm import protocol
from edgetrain.comm.wire import Message, arrays_from_state
from edgetrain.gossip.mixing import check_compatible, merge_into
from edgetrain.gossip.node import GossipNode
from edgetrain.recipe import GossipSection
from edgetrain.worker.client import CoordinatorClient
from edgetrain.worker.trainer import LocalTrainer

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 0.5
BARRIER_TIMEOUT_S = 3600.0


class GoSGD:
    """One GoSGD worker: trains locally, gossips, and follows the coordinator's phases."""

    def __init__(
        self,
        trainer: LocalTrainer,
        node: GossipNode,
        client: CoordinatorClient,
        cfg: GossipSection,
        num_workers: int,
        epochs: int,
        eval_every: int,
        seed: int,
        checkpoint_every: int = 0,
        start_epoch: int = 1,
    ) -> None:
        self.trainer = trainer
        self.node = node
        self.client = client
        self.cfg = cfg
        self.epochs = epochs
        self.eval_every = eval_every
        self.alpha = 1.0 / num_workers
        self.checkpoint_every = checkpoint_every
        self.start_epoch = start_epoch
        self.rng = np.random.default_rng([seed, trainer.worker_id, 0x90551, start_epoch])
        # Float entries of the state dict share storage with the model: merging updates it.
        self.state = {k: v for k, v in trainer.model.state_dict().items() if v.is_floating_point()}
        self.merged = 0
        self.pushed = 0
        self.excluded: set[int] = set()  # failed peers: never gossip with them again
        client.on_message = self.on_coordinator

    def on_coordinator(self, msg: Message) -> None:
        """A coordinator message nobody waited for: ``peers`` names the failed workers."""
        if msg.type == protocol.PEERS:
            failed = msg.meta.get("failed", [])
            if isinstance(failed, list):
                self.excluded.update(i for i in failed if isinstance(i, int))
                log.info("peers %s failed; gossiping without them", sorted(self.excluded))

    # ------------------------------------------------------------------ gossip

    def absorb(self) -> None:
        """Merge every valid message waiting in the inbox."""
        for msg in self.node.receive_all():
            alpha = msg.meta.get("alpha")
            reason = check_compatible(self.state, msg.tensors, alpha)
            if reason is not None:
                self.node.traffic.drop(reason, msg.sender)
                continue
            assert isinstance(alpha, (int, float))  # check_compatible made sure
            self.alpha = merge_into(self.state, self.alpha, msg.tensors, float(alpha))
            self.merged += 1

    def maybe_push(self, epoch: int, step: int) -> None:
        peers = [p for p in self.node.peers if p not in self.excluded]
        if not peers or self.rng.random() >= self.cfg.probability:
            return
        target = peers[int(self.rng.integers(len(peers)))]
        half = self.alpha / 2.0
        msg = Message(
            protocol.GOSSIP,
            self.node.name,
            self.node.run_id,
            step,
            epoch,
            {"alpha": half},
            arrays_from_state(self.state),
        )
        if self.node.send(target, msg):
            self.alpha = half
            self.pushed += 1

    # ------------------------------------------------------------------ phases

    def _metrics(self, losses: list[float], started: float, evaluate: bool) -> dict[str, Any]:
        t = self.trainer
        m: dict[str, Any] = {
            "loss": float(np.mean(losses)) if losses else None,
            "steps": t.steps,
            "samples": t.num_samples,
            "epoch_s": time.monotonic() - started,
            "compute_s": t.times.compute_s,
            "sleep_s": t.times.sleep_s,
            "alpha": self.alpha,
            "gossip_sent": self.pushed,
            "gossip_merged": self.merged,
            **self.node.traffic.as_dict(),
        }
        if evaluate:
            acc, loss = t.evaluate()
            m["test_accuracy"] = acc
            m["test_loss"] = loss
        return m

    def train(self) -> None:
        """All epochs, with the coordinator's barrier between them when it asks for one."""
        last_progress = 0.0
        for epoch in range(self.start_epoch, self.epochs + 1):
            started = time.monotonic()
            losses: list[float] = []
            for xb, yb in self.trainer.batches(epoch):
                self.client.dispatch()
                self.absorb()
                losses.append(self.trainer.step(xb, yb))
                self.maybe_push(epoch, self.trainer.steps)
                now = time.monotonic()
                if now - last_progress >= PROGRESS_INTERVAL_S:
                    last_progress = now
                    self.client.send(
                        protocol.PROGRESS,
                        {"loss": losses[-1]},
                        epoch=epoch,
                        step=self.trainer.steps,
                    )
            evaluate = epoch % self.eval_every == 0 or epoch == self.epochs
            metrics = self._metrics(losses, started, evaluate)
            tensors: dict[str, np.ndarray] = {}
            if self.checkpoint_every and epoch % self.checkpoint_every == 0 and epoch < self.epochs:
                metrics["checkpoint"] = {"alpha": self.alpha}
                tensors = self.checkpoint_state()
            self.client.send(
                protocol.EPOCH_END, metrics, epoch=epoch, step=self.trainer.steps, tensors=tensors
            )
            if self.cfg.sync_epochs and epoch < self.epochs:
                self.client.wait_for(protocol.GO, BARRIER_TIMEOUT_S, self.node.inbox, self.absorb)

    def _missing(self, expect_from: dict[str, int]) -> int:
        return sum(
            max(0, n - self.node.received_from[protocol.worker_name(int(peer))])
            for peer, n in expect_from.items()
        )

    def checkpoint_state(self) -> dict[str, np.ndarray]:
        """Weights plus the optimiser's per-parameter state (``optim.<i>.<key>``) as arrays."""
        out = arrays_from_state(self.state)
        opt_state = self.trainer.optimizer.state_dict()["state"]
        for idx, entries in opt_state.items():
            for key, value in entries.items():
                if hasattr(value, "detach"):
                    out[f"optim.{idx}.{key}"] = value.detach().cpu().numpy().copy()
        return out

    def load_checkpoint(self, tensors: dict[str, np.ndarray], alpha: float) -> None:
        """Restore what :meth:`checkpoint_state` saved (on resume)."""
        import torch

        weights = {k: torch.from_numpy(np.array(v)) for k, v in tensors.items() if k in self.state}
        missing = set(self.state) - set(weights)
        if missing:
            raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {sorted(missing)[0]}")
        with torch.no_grad():
            for k, v in weights.items():
                self.state[k].copy_(v.reshape(self.state[k].shape))
        opt = self.trainer.optimizer.state_dict()
        restored: dict[int, dict[str, Any]] = {}
        for name, value in tensors.items():
            parts = name.split(".")
            if len(parts) == 3 and parts[0] == "optim" and parts[1].isdigit():
                t = torch.from_numpy(np.array(value))
                restored.setdefault(int(parts[1]), {})[parts[2]] = t
        if restored:
            opt["state"] = restored
            self.trainer.optimizer.load_state_dict(opt)
        self.alpha = alpha

    def finish(self) -> None:
        """Report what was sent, drain what peers sent here, then hand in the final weights."""
        sent = {str(k): v for k, v in self.node.sent.items()}
        self.client.send(protocol.DONE, {"sent": sent}, epoch=self.epochs, step=self.trainer.steps)
        drain = self.client.wait_for(
            protocol.DRAIN, BARRIER_TIMEOUT_S, self.node.inbox, self.absorb
        )
        expect_from = _expectations(drain.meta.get("expect_from"))
        expect = sum(expect_from.values())
        deadline = time.monotonic() + self.cfg.drain_timeout_s
        while self._missing(expect_from) and time.monotonic() < deadline:
            if self.node.inbox.poll(200, zmq.POLLIN):
                self.absorb()
        if missing := self._missing(expect_from):
            log.warning("drain: %d of %d gossip messages never arrived", missing, expect)
        acc, loss = self.trainer.evaluate()
        meta = {
            "alpha": self.alpha,
            "final_test_accuracy": acc,
            "final_test_loss": loss,
            "steps": self.trainer.steps,
            "gossip_sent": self.pushed,
            "gossip_merged": self.merged,
            "gossip_expected": expect,
            **self.node.traffic.as_dict(),
        }
        self.client.send(
            protocol.FINAL,
            meta,
            epoch=self.epochs,
            step=self.trainer.steps,
            tensors=arrays_from_state(self.state),
        )


def _expectations(value: Any) -> dict[str, int]:
    """``drain``'s per-sender message counts, with anything malformed left out."""
    if not isinstance(value, dict):
        return {}
    return {
        str(k): v
        for k, v in value.items()
        if str(k).isdigit() and isinstance(v, int) and not isinstance(v, bool) and v >= 0
    }
