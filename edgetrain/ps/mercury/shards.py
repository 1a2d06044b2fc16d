"""Mercury's multi-parameter-server arithmetic (specs/ps.md §2.1): which slice of the flat
parameter vector each device owns, the owner's weighted average of its slice, and the
replica fingerprint. Pure.

Device k owns ``S_k = [floor(kP/K), floor((k+1)P/K))`` of the ``P`` parameters in model order
(MXNet's big-array rule applied to the whole model: it balances bytes even for LeNet-5, whose
fc1 holds 78% of the parameters). Iteration t's average of a slice is
``sum_j (n_j / sum n) g_j[S_k]``, summed in device order once all K slices are in, so the
result cannot depend on arrival order; every device then applies the same bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from edgetrain.ps.gradient_sum import keep


def bounds(params: int, devices: int) -> list[tuple[int, int]]:
    """``[(lo, hi)]`` of every device's slice of ``params`` elements."""
    if devices < 1:
        raise ValueError("there must be at least one device")
    return [(k * params // devices, (k + 1) * params // devices) for k in range(devices)]


def device_weights(sizes: Sequence[int]) -> np.ndarray:
    """``n_j / sum n`` as float32, in device order (equal shards: 1/K each)."""
    total = float(sum(sizes))
    if total <= 0 or any(s < 0 for s in sizes):
        raise ValueError(f"local dataset sizes must be non-negative with a positive sum: {sizes}")
    return np.array([s / total for s in sizes], dtype=np.float32)


class Averager:
    """The slices of one owner's shard, by iteration and device; averaged in device order."""

    def __init__(self, weights: np.ndarray, width: int, first_iteration: int = 0) -> None:
        self.weights = np.asarray(weights, dtype=np.float32)
        self.width = width
        self.next = first_iteration  # the iteration averaged next
        self._pending: dict[int, dict[int, np.ndarray]] = {}

    @property
    def devices(self) -> int:
        return len(self.weights)

    def add(self, iteration: int, device: int, grad: np.ndarray) -> str | None:
        """Take a slice; returns why it is refused (a counter reason), or None."""
        if not 0 <= device < self.devices:
            return "unknown_device"
        if grad.shape != (self.width,):
            return "bad_slice_shape"
        # a device is at most one iteration ahead of an owner
        return keep(self._pending, self.next, iteration, device, grad, "slice")

    def ready(self) -> np.ndarray | None:
        """The weighted average of the next iteration once all K slices are in (the iteration
        advances), else None."""
        got = self._pending.get(self.next, {})
        if len(got) < self.devices:
            return None
        total = self.weights[0] * np.asarray(got[0], dtype=np.float32)
        for j in range(1, self.devices):
            total += self.weights[j] * np.asarray(got[j], dtype=np.float32)
        del self._pending[self.next]
        self.next += 1
        return np.asarray(total, dtype=np.float32)


def weights_hash(flat: np.ndarray) -> str:
    """A 64-bit fingerprint (16 hex digits) of a replica's flat float32 weights."""
    data = np.ascontiguousarray(flat, dtype=np.float32)
    return hashlib.blake2b(data.tobytes(), digest_size=8).hexdigest()


def diverged(hashes: dict[int, str]) -> list[int]:
    """The devices whose hash differs from the lowest device's (sorted; [] if all agree)."""
    if not hashes:
        return []
    ref = hashes[min(hashes)]
    return sorted(d for d, h in hashes.items() if h != ref)


def naming(devices: list[int]) -> str:
    """``device 2 holds`` / ``devices 1, 3 hold``: the subject of a divergence message."""
    if len(devices) == 1:
        return f"device {devices[0]} holds"
    return f"devices {', '.join(str(d) for d in devices)} hold"
