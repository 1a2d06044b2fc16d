"""A worker's minibatches when batch sizes differ and change: cyclic passes over its shard,
reshuffled at every pass (gossip.md B.3: a fast worker goes through its shard more often).
Seeded by (run seed, worker, pass), so arms with the same batch sizes draw the same samples."""

from __future__ import annotations

import numpy as np

_SALT = 0xC1C


class CyclicSampler:
    """Draws the next ``m`` indices of ``n``; a pass that runs out continues in the next."""

    def __init__(self, n: int, seed: int, worker: int) -> None:
        if n < 1:
            raise ValueError("a worker needs at least one sample")
        self.n, self.seed, self.worker = n, seed, worker
        self.passes = 0
        self.pos = 0
        self.order = self._order(0)

    def _order(self, pass_: int) -> np.ndarray:
        return np.random.default_rng([self.seed, self.worker, pass_, _SALT]).permutation(self.n)

    def next(self, m: int) -> np.ndarray:
        out: list[np.ndarray] = []
        need = m
        while need > 0:
            if self.pos >= self.n:
                self.passes += 1
                self.order, self.pos = self._order(self.passes), 0
            take = min(need, self.n - self.pos)
            out.append(self.order[self.pos : self.pos + take])
            self.pos += take
            need -= take
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
