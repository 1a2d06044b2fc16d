"""A DLion, Gaia or Ako worker's rejoin (``[run] restart``, ``edgetrain join``): the live model
and the run's iteration from a peer, handed over at the epoch barrier where it re-enters.

These techniques exchange gradients iteration by iteration, every worker waiting for its peers'
messages of iteration t, so a restarted worker must re-enter at the very iteration its peers
are at, with their model. With epoch barriers (``[gossip] sync_epochs``, which a restart needs)
every live worker hears of the rejoin (``peers`` with ``joined``) while it waits for the
barrier's release, before it trains the epoch: each reconnects to the new process and expects
its messages from its own next iteration, the first of the epoch, the same on every worker.
One of them, the donor (the next live id after the rejoining worker's, :func:`donor_of`), sends
it there and then its weights, its optimiser state, the iteration and the samples the run has
processed (``x.model``). The rejoining worker waits for that message before it trains
(:data:`FETCH_WAIT_S`, else it fails and its restart budget decides), takes every other message
that comes meanwhile in order afterwards, and starts at the donor's iteration. Per-link state a
peer kept for it (DLion's residual of the link) starts again. What is not handed over: the
gradients of the epoch's last iterations that reached the donor after its last update, and the
rejoining worker's own per-link state (residuals, bandwidth estimates), which start afresh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgetrain.comm.wire import is_count
from edgetrain.gossip.rejoin import ask_order

MODEL = "x.model"
# How long a rejoining worker waits for its donor's model before it gives up (a donor sends it
# when it hears of the rejoin, at the barrier the worker re-enters at).
FETCH_WAIT_S = 60.0


def donor_of(rejoining: int, live: Sequence[int], workers: int) -> int | None:
    """The live worker that hands ``rejoining`` the model: the next live id after its own
    (wrapping). Every live worker computes the same from the same failures. Pure."""
    others = [w for w in live if w != rejoining]
    return ask_order(others, rejoining, workers)[0] if others else None


def model_fields(meta: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> str | None:
    """Why a ``x.model`` cannot be taken (a counter reason), or None: the iteration and the
    samples as counts, and tensors."""
    if not is_count(meta.get("t")) or not is_count(meta.get("samples")):
        return "bad_model_header"
    if not tensors:
        return "bad_model_tensors"
    return None
