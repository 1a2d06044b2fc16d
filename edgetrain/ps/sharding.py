"""Which server shard holds which parameter tensor: whole tensors, balanced by bytes. Pure.

Longest-processing-time greedy: tensors by size, largest first (ties: model order), each onto
the server with the fewest bytes so far (ties: the lowest index). Every process computes the
same layout from the model alone; :func:`layout_hash` lets a server refuse a trainer that
computed another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence


def shard(sizes: Sequence[tuple[str, int]], servers: int) -> dict[str, int]:
    """``{tensor name: server index}`` for tensors ``(name, bytes)`` in model order."""
    if servers < 1:
        raise ValueError("there must be at least one server")
    load = [0] * servers
    out: dict[str, int] = {}
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i][1], i))
    for i in order:
        name, nbytes = sizes[i]
        k = min(range(servers), key=lambda s: (load[s], s))
        out[name] = k
        load[k] += nbytes
    return out


def loads(layout: dict[str, int], sizes: Sequence[tuple[str, int]], servers: int) -> list[int]:
    """Bytes held by each server."""
    size = dict(sizes)
    out = [0] * servers
    for name, k in layout.items():
        out[k] += size[name]
    return out


def layout_hash(layout: dict[str, int], shapes: dict[str, tuple[int, ...]]) -> str:
    """A short fingerprint of the layout and the tensors' shapes."""
    data = json.dumps(
        [[n, layout[n], list(shapes[n])] for n in sorted(layout)], separators=(",", ":")
    )
    return hashlib.sha256(data.encode()).hexdigest()[:16]
