"""The in-memory dataset every loader returns: normalised train and test arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Dataset:
    """Train and test splits as float32 ``(N, C, H, W)`` images and int64 labels.

    Images are normalised per channel (mean 0, std 1) with the training split's statistics.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """One sample's shape ``(C, H, W)``."""
        c, h, w = self.x_train.shape[1:]
        return int(c), int(h), int(w)


def derive_seed(seed: int, salt: int) -> int:
    """A 32-bit seed derived from a user's seed (any int, negative too) and a per-use salt.

    Different salts give independent streams, so that e.g. the train/test cut and the worker
    partition do not reuse the same random numbers. Valid for numpy and scikit-learn.
    """
    parts = [abs(int(seed)), int(seed < 0), int(salt)]
    return int(np.random.SeedSequence(parts).generate_state(1, dtype=np.uint32)[0])
