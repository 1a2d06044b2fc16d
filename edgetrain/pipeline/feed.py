"""The microbatches of an epoch: one seeded order over the whole training split. Pure.

Every technique of the family draws the same sequence (Local takes microbatch j whole, stage 0
feeds it down the pipeline, data-parallel replica r takes its r-th slice), so they differ only
in how they train on it. The last incomplete microbatch is dropped (constant shapes)."""

from __future__ import annotations

import numpy as np


def per_epoch(samples: int, microbatch: int, cap: int | None = None) -> int:
    """Microbatches in an epoch: full ones only, at most ``cap``."""
    m = samples // microbatch
    return min(m, cap) if cap is not None else m


def epoch_order(
    samples: int, microbatch: int, seed: int, epoch: int, cap: int | None = None
) -> list[np.ndarray]:
    """Sample indices of each microbatch of ``epoch``."""
    rng = np.random.default_rng([seed, epoch, 0xB17E])
    perm = rng.permutation(samples)
    m = per_epoch(samples, microbatch, cap)
    return [perm[j * microbatch : (j + 1) * microbatch] for j in range(m)]


def replica_slice(indices: np.ndarray, replica: int, replicas: int) -> np.ndarray:
    """Replica ``replica``'s rows of a microbatch (the microbatch divides evenly)."""
    size = len(indices) // replicas
    return indices[replica * size : (replica + 1) * size]
