"""A gossip worker's rejoin: a restarted worker asks a live peer for its current model, and
peers answer such asks, over the gossip sockets (``[run] restart``).

The rejoining worker sends ``fetch_model`` to one peer after another (the next ids after its
own first, so several rejoining workers spread their asks) and waits for the answer: a
``model`` message holding the peer's weights, its optimiser state and half its alpha, as a
GoSGD push gives away, so the run's alpha total does not change. A peer answers once the
coordinator has told it where the rejoining worker's new process listens (``peers`` with
``joined``); an ask that comes earlier waits. When no peer answers, the worker keeps what it
has: the run's last checkpoint (in its ``welcome``), else its initial weights. Neither message
counts in the drain's accounting (:class:`~edgetrain.gossip.node.GossipNode` ``uncounted``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import zmq

from edgetrain.comm.wire import Message, arrays_from_state
from edgetrain.gossip.node import GossipNode
from edgetrain.runtime.weights import load_arrays, model_sha256, state_arrays

FETCH = "fetch_model"
MODEL = "model"
REJOIN_TYPES = (FETCH, MODEL)
# How long a rejoining worker waits for one peer's answer before it asks the next.
MIN_FETCH_WAIT_S = 5.0

log = logging.getLogger(__name__)


def ask_order(peers: list[int], me: int, workers: int) -> list[int]:
    """The peers to ask, the next ids after ``me`` first (wrapping). Pure."""
    return sorted(peers, key=lambda p: (p - me) % max(workers, 1))


@dataclass
class Donor:
    """A peer's side: the asks it holds and the rejoined peers it may answer."""

    asked: set[int] = field(default_factory=set)
    known: set[int] = field(default_factory=set)  # rejoined peers whose new endpoint it has
    served: list[dict[str, Any]] = field(default_factory=list)  # for the next epoch's report

    def answer(
        self,
        node: GossipNode,
        state: Mapping[str, torch.Tensor],
        optimizer: torch.optim.Optimizer | None,
        alpha: float,
    ) -> float:
        """Send the model to every asking peer it may answer now; return the alpha kept."""
        for peer in sorted(self.asked & self.known):
            if not node.wait_room(peer, 0):
                continue
            half = alpha / 2.0
            msg, sha = model_message(node, MODEL, state, optimizer, {"alpha": half})
            if node.send(peer, msg):
                alpha = half
                self.asked.discard(peer)
                self.served.append({"to": peer, "model_sha256": sha, "at": time.time()})
                log.info("sent the current model to rejoined worker %d", peer)
        return alpha

    def report(self) -> list[dict[str, Any]]:
        """What was served since the last report (then forgotten)."""
        out, self.served = self.served, []
        return out


def model_message(
    node: GossipNode,
    kind: str,
    state: Mapping[str, torch.Tensor],
    optimizer: torch.optim.Optimizer | None,
    meta: Mapping[str, Any],
    step: int = 0,
) -> tuple[Message, str]:
    """A message of ``kind`` that hands a rejoined peer this worker's weights and optimiser
    state, with ``meta`` and the weights' SHA-256 (``model_sha256``); and that SHA-256."""
    sha = model_sha256(arrays_from_state(state))
    arrays = state_arrays(state, optimizer)
    full = {**meta, "model_sha256": sha}
    return Message(kind, node.name, node.run_id, step, 0, full, arrays), sha


def fetch_model(
    node: GossipNode,
    peers: list[int],
    state: Mapping[str, torch.Tensor],
    optimizer: torch.optim.Optimizer | None,
    wait_s: float,
    poll: Callable[[], None],
    on_other: Callable[[Message], None],
) -> tuple[dict[str, Any], float | None]:
    """Ask ``peers`` in turn for the current model and load the first answer into ``state``
    (and ``optimizer``). Returns the report and the alpha the answer brought (None: nobody
    answered); every other message received meanwhile goes to ``on_other`` afterwards."""
    started = time.monotonic()
    report: dict[str, Any] = {"before_sha256": model_sha256(arrays_from_state(state))}
    held: list[Message] = []
    alpha: float | None = None
    for peer in peers:
        if not node.wait_room(peer, 1000):
            continue
        node.send(peer, Message(FETCH, node.name, node.run_id))
        deadline = time.monotonic() + wait_s
        while alpha is None and time.monotonic() < deadline:
            if node.inbox.poll(100, zmq.POLLIN):
                for msg in node.receive_all():
                    if msg.type == MODEL and node.peer_ids.get(msg.sender) == peer:
                        alpha = _load(msg, state, optimizer, report, peer)
                    elif msg.type != MODEL:
                        held.append(msg)
            poll()
        if alpha is not None:
            break
        log.warning("worker %d did not send its model within %.0f s", peer, wait_s)
    if alpha is None:
        report["source"] = "fallback"
    report["model_sha256"] = model_sha256(arrays_from_state(state))
    report["fetch_s"] = time.monotonic() - started
    for msg in held:
        on_other(msg)
    return report, alpha


def _load(
    msg: Message,
    state: Mapping[str, torch.Tensor],
    optimizer: torch.optim.Optimizer | None,
    report: dict[str, Any],
    peer: int,
) -> float | None:
    """Load a peer's answer; its alpha, or None when the answer does not fit (counted)."""
    alpha = msg.meta.get("alpha")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not alpha > 0:
        return None
    try:
        load_arrays(state, msg.tensors, optimizer, what=f"model from worker {peer}")
    except Exception as exc:  # noqa: BLE001 - a bad answer is the next peer's turn
        log.warning("worker %d's model does not fit: %s", peer, exc)
        return None
    report.update(source="peer", peer=peer, peer_sha256=msg.meta.get("model_sha256"))
    return float(alpha)
