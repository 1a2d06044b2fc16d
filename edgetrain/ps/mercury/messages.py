"""Messages between Mercury devices, and their checks (specs/ps.md §2.1, §2.4).

- ``mc.grad`` (device -> shard owner): ``iter``, ``lo``, ``hi``, ``hash`` (some iterations);
  tensor ``g``, the owner's slice of the local gradient;
- ``mc.avg`` (owner -> every device): ``iter``, ``lo``, ``hi``; ``g``, the averaged slice;
- ``mc.swap`` (lower device of a pair -> the other): ``round``, ``seq``, ``codec``; a chunk
  of samples (:mod:`.codec`);
- ``mc.swap_ok`` (the answer): the same fields; as many of its own samples, or fewer.

A device's DEALER to each peer carries its requests (``mc.grad``, ``mc.swap``) and gets the
answers; its ROUTER serves the peers' requests. Everything received is checked (iteration,
slice bounds, dtype, shape, finite values, sample arrays); anything else is dropped and
counted by reason. In a run that rewinds every message also carries ``gen`` (the sender's
generation; absent: 0), and one of another generation than the receiver's is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from edgetrain.comm.wire import float32_problem, is_count

GRAD = "mc.grad"
AVG = "mc.avg"
SWAP = "mc.swap"
SWAP_OK = "mc.swap_ok"
TO_OWNER = (GRAD, SWAP)
TO_DEVICE = (AVG, SWAP_OK)


def slice_fields(
    meta: Mapping[str, Any], tensors: Mapping[str, np.ndarray], bounds: tuple[int, int]
) -> str | None:
    """Why an ``mc.grad``/``mc.avg`` is unusable (a counter reason), or None: the slice it
    names must be ``bounds``, its one tensor ``g`` float32 of that width and finite."""
    if not is_count(meta.get("iter")):
        return "bad_iter"
    if meta.get("lo") != bounds[0] or meta.get("hi") != bounds[1]:
        return "wrong_slice"
    h = meta.get("hash")
    if h is not None and (not isinstance(h, str) or len(h) != 16):
        return "bad_hash"
    if set(tensors) != {"g"}:
        return "bad_tensor_names"
    return float32_problem(tensors["g"], (bounds[1] - bounds[0],))


def swap_fields(meta: Mapping[str, Any], codec: str) -> str | None:
    """Why an ``mc.swap``/``mc.swap_ok`` header is unusable, or None."""
    if not is_count(meta.get("round")) or not is_count(meta.get("seq")):
        return "bad_round"
    if meta.get("codec") != codec:
        return "wrong_codec"
    return None
