"""Messages between parameter-server trainers and shards, and their checks.

One transmission is one request/reply pair with every shard that holds part of a segment. A
trainer keeps several transmissions in flight (pipelined, as a real client would), so every
request carries a request id ``req``, unique within the trainer, and its replies echo it:

| type | way | meta | tensors |
|---|---|---|---|
| ``ps.pull`` | trainer->shard | ``iter``, ``seg``, ``req``, ``names``, ``layout`` | none |
| ``ps.params`` | shard->trainer | ``iter``, ``seg``, ``req``, ``held_s`` (version wait) | weights |
| ``ps.push`` | trainer->shard | ``iter``, ``seg``, ``req``, ``layout`` | the gradients |
| ``ps.ack`` | shard->trainer | ``iter``, ``seg``, ``req`` (on receipt) | none |
| ``ps.state`` | trainer->rebuilt shard | ``names``, ``versions``, ``pushed``, ``layout`` | copy |

A restarted shard is rebuilt from the trainers' copies (:mod:`.recovery`): each trainer's first
message to it is a ``ps.state``; the pushes it then sends again that the dead shard had
acknowledged already carry ``req`` :data:`RESENT_REQ` (their acknowledgements answer nothing).

Everything received is checked against the layout (names a shard owns, shapes, dtypes, finite
values); anything else is dropped and counted by reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from edgetrain.comm.wire import Chunked, float32_problem, is_count

PULL = "ps.pull"
PARAMS = "ps.params"
PUSH = "ps.push"
ACK = "ps.ack"
STATE = "ps.state"
TO_SERVER = (PULL, PUSH, STATE)
# The request id of a push sent again to a rebuilt shard after its first acknowledgement.
RESENT_REQ = 0
TO_TRAINER = (PARAMS, ACK)


def request_fields(meta: Mapping[str, Any], owned: set[str], layout: str) -> str | None:
    """Why a pull or push header is unusable (a counter reason), or None."""
    names = meta.get("names")
    if not is_count(meta.get("iter")):
        return "bad_iter"
    if not is_count(meta.get("seg")):
        return "bad_seg"
    if not is_count(meta.get("req")):
        return "bad_req"
    if meta.get("layout") != layout:
        return "wrong_layout"
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        return "bad_names"
    if not set(names) <= owned or len(set(names)) != len(names):
        return "not_owned"
    return None


def gradients(
    tensors: Mapping[str, np.ndarray],
    names: list[str],
    shapes: Mapping[str, tuple[int, ...]],
    chunked: Mapping[str, Chunked] | None = None,
) -> str | None:
    """Why a push's gradients are unusable, or None: exactly ``names`` (``chunked``: those of
    several frames, unjoined), float32, the shapes, finite."""
    got = _by_name(tensors, chunked, names)
    if got is None:
        return "bad_tensor_names"
    for name in names:
        reason = float32_problem(got[name], shapes[name])
        if reason is not None:
            return reason
    return None


def copy_in(
    params: Mapping[str, torch.Tensor],
    tensors: Mapping[str, np.ndarray],
    names: list[str],
    chunked: Mapping[str, Chunked] | None = None,
) -> str | None:
    """Copy a pull's answer into a trainer's parameters; why it cannot be, or None (exactly
    ``names``, each float32 of its parameter's shape; nothing is copied then). ``chunked``:
    the answer's tensors of several frames, copied frame by frame (never joined first)."""
    got = _by_name(tensors, chunked, names)
    if got is None:
        return "answered a pull with other tensors"
    for n in names:
        if tuple(got[n].shape) != tuple(params[n].shape) or got[n].dtype != np.float32:
            return f"sent {n} with a wrong shape or dtype"
    with torch.no_grad():
        for n in names:
            p, arr = params[n], got[n]
            if p.device.type != "cpu":  # a GPU trainer: one host-to-device copy
                host = arr.join() if isinstance(arr, Chunked) else np.array(arr)
                p.copy_(torch.from_numpy(host))
            elif isinstance(arr, Chunked):
                arr.copy_to(p.detach().numpy())
            else:
                np.copyto(p.detach().numpy(), arr)  # (received arrays are read-only)
    return None


def _by_name(
    tensors: Mapping[str, np.ndarray], chunked: Mapping[str, Chunked] | None, names: list[str]
) -> dict[str, np.ndarray | Chunked] | None:
    """A message's tensors, joined or not, by name, if they are exactly ``names`` (no name in
    both), else None."""
    got: dict[str, np.ndarray | Chunked] = {**tensors, **(chunked or {})}
    if set(got) != set(names) or len(got) != len(tensors) + len(chunked or {}):
        return None
    return got
