"""Samples on the wire for resharding: images as raw uint8, labels, importance and stamp. Pure.

The loaders normalise images per channel, so every value of a channel is an affine image of
the raw byte. The codec maps each channel's range over the whole training split (every device
loads the same split, so every device builds the same codec) back onto 0..255: MNIST's bytes
come back exactly, its float values within float32 rounding. A receiver refuses a chunk
encoded by another codec (``digest``) or whose arrays do not fit (:func:`check`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

LABEL_BYTES = 8 + 4 + 4  # int64 label, float32 importance, int32 stamp
FIELDS = ("x", "y", "imp", "stamp")


@dataclass(frozen=True)
class SampleCodec:
    """Per-channel affine uint8 coding of one dataset's images."""

    lo: np.ndarray  # float32 (C,)
    hi: np.ndarray  # float32 (C,)
    shape: tuple[int, int, int]
    classes: int

    @classmethod
    def of(cls, x_train: np.ndarray, classes: int) -> SampleCodec:
        c = x_train.shape[1]
        flat = x_train.reshape(len(x_train), c, -1)
        lo = flat.min(axis=(0, 2)).astype(np.float32)
        hi = flat.max(axis=(0, 2)).astype(np.float32)
        hi = np.where(hi > lo, hi, lo + np.float32(1.0)).astype(np.float32)
        shape = (int(x_train.shape[1]), int(x_train.shape[2]), int(x_train.shape[3]))
        return cls(lo, hi, shape, int(classes))

    @property
    def digest(self) -> str:
        data = self.lo.tobytes() + self.hi.tobytes() + repr((self.shape, self.classes)).encode()
        return hashlib.blake2b(data, digest_size=8).hexdigest()

    @property
    def sample_bytes(self) -> int:
        c, h, w = self.shape
        return c * h * w + LABEL_BYTES

    def per_chunk(self, chunk_bytes: int) -> int:
        """Samples in one chunk of at most ``chunk_bytes`` (at least one)."""
        return max(1, chunk_bytes // self.sample_bytes)

    def encode(self, x: np.ndarray) -> np.ndarray:
        lo = self.lo[None, :, None, None]
        span = (self.hi - self.lo)[None, :, None, None]
        u = np.rint((np.asarray(x, dtype=np.float32) - lo) / span * np.float32(255.0))
        return np.asarray(np.clip(u, 0, 255), dtype=np.uint8)

    def decode(self, u: np.ndarray) -> np.ndarray:
        lo = self.lo[None, :, None, None]
        span = (self.hi - self.lo)[None, :, None, None]
        out = lo + u.astype(np.float32) / np.float32(255.0) * span
        return np.asarray(out, dtype=np.float32)

    def pack(
        self, x: np.ndarray, y: np.ndarray, importance: np.ndarray, stamp: np.ndarray
    ) -> dict[str, np.ndarray]:
        """The tensors of one chunk."""
        return {
            "x": self.encode(x),
            "y": np.asarray(y, dtype=np.int64),
            "imp": np.asarray(importance, dtype=np.float32),
            "stamp": np.clip(stamp, -(2**31), 2**31 - 1).astype(np.int32),
        }

    def check(self, tensors: Mapping[str, np.ndarray], limit: int) -> str | None:
        """Why a chunk's arrays are unusable (a counter reason), or None."""
        if set(tensors) != set(FIELDS):
            return "bad_swap_tensors"
        x, y, imp, stamp = (tensors[k] for k in FIELDS)
        m = len(y) if y.ndim == 1 else -1
        if m < 0 or m > limit:
            return "bad_swap_count"
        if x.dtype != np.uint8 or tuple(x.shape) != (m, *self.shape):
            return "bad_swap_images"
        if y.dtype != np.int64 or (m and (y.min() < 0 or y.max() >= self.classes)):
            return "bad_swap_labels"
        if imp.dtype != np.float32 or imp.shape != (m,) or not np.isfinite(imp).all():
            return "bad_swap_importance"
        if m and imp.min() < 0:
            return "bad_swap_importance"
        if stamp.dtype != np.int32 or stamp.shape != (m,):
            return "bad_swap_stamp"
        return None
