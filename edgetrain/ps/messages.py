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
TO_SERVER = (PULL, PUSH)
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
    chunked = chunked or {}
    if set(tensors) | set(chunked) != set(names) or set(tensors) & set(chunked):
        return "bad_tensor_names"
    for name in names:
        got = tensors[name] if name in tensors else chunked[name]
        reason = float32_problem(got, shapes[name])
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
    chunked = chunked or {}
    if set(tensors) | set(chunked) != set(names) or set(tensors) & set(chunked):
        return "answered a pull with other tensors"
    for n in names:
        got = tensors[n] if n in tensors else chunked[n]
        if tuple(got.shape) != tuple(params[n].shape) or got.dtype != np.float32:
            return f"sent {n} with a wrong shape or dtype"
    with torch.no_grad():
        for n in names:
            p = params[n]
            if p.device.type == "cpu" and n in chunked:
                chunked[n].copy_to(p.detach().numpy())
            elif p.device.type == "cpu":
                np.copyto(p.detach().numpy(), tensors[n])  # (received arrays are read-only)
            else:  # a GPU trainer: one host-to-device copy
                arr = chunked[n].join() if n in chunked else np.array(tensors[n])
                p.copy_(torch.from_numpy(arr))
    return None
