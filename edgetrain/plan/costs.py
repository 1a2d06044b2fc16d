"""Per-layer costs of one training iteration on a parameter-server worker (ALGORITHMS.md §1).

``pt``/``gt``: seconds to pull a layer's parameters / push its gradients; ``fc``/``bc``: its
forward / backward compute seconds; ``dt``: the fixed overhead of every separate transmission.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class LayerCosts:
    """Cost vectors of L layers in forward order, plus the per-transmission overhead."""

    pt: np.ndarray
    fc: np.ndarray
    bc: np.ndarray
    gt: np.ndarray
    dt: float
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        arrays = [np.asarray(a, dtype=np.float64) for a in (self.pt, self.fc, self.bc, self.gt)]
        n = len(arrays[0])
        if n == 0:
            raise ValueError("costs need at least one layer")
        for label, a in zip(("pt", "fc", "bc", "gt"), arrays, strict=True):
            if a.ndim != 1 or len(a) != n:
                raise ValueError(f"{label} must be a vector of {n} layers")
            if not np.all(np.isfinite(a)) or np.any(a < 0):
                raise ValueError(f"{label} must hold finite, non-negative seconds")
        if not np.isfinite(self.dt) or self.dt < 0:
            raise ValueError("dt must be finite and non-negative")
        for field_name, a in zip(("pt", "fc", "bc", "gt"), arrays, strict=True):
            object.__setattr__(self, field_name, a)
        names = self.names or tuple(f"layer{i + 1}" for i in range(n))
        if len(names) != n:
            raise ValueError(f"names must have {n} entries")
        object.__setattr__(self, "names", tuple(names))
        object.__setattr__(self, "dt", float(self.dt))

    @property
    def num_layers(self) -> int:
        return len(self.pt)

    @classmethod
    def random(cls, rng: np.random.Generator, layers: int, dt: float) -> LayerCosts:
        """Random costs, for tests and benchmarks."""
        pt, fc, bc, gt = (rng.exponential(1.0, layers) for _ in range(4))
        return cls(pt, fc, bc, gt, dt)
