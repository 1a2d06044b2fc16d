"""Build one set of aggregated points: reduce, divide within classes, average; timed per step."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetrain.aggregate.divide import DIVIDERS, KMEANS_FLAT_LIMIT, KMEANS_ITERATIONS, divide
from edgetrain.aggregate.points import member_means, membership, subset_labels
from edgetrain.aggregate.reduce import DEFAULT_CHUNK, REDUCERS, default_dims, reduce_features

STEPS = ("reduce", "divide", "aggregate")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class AggregateConfig:
    """How to build aggregated points (mirrors the recipe's ``[aggregate]`` section)."""

    reduce: str = "svd"
    divide: str = "kmeans"
    ratio: int = 10
    seed: int = 0
    dims: int | None = None
    kmeans_iterations: int = KMEANS_ITERATIONS
    kmeans_flat_limit: int | None = KMEANS_FLAT_LIMIT
    chunk_size: int = DEFAULT_CHUNK

    def __post_init__(self) -> None:
        if self.reduce not in REDUCERS:
            raise ValueError(f"unknown reducer {self.reduce!r}; use one of {', '.join(REDUCERS)}")
        if self.divide not in DIVIDERS:
            raise ValueError(f"unknown divider {self.divide!r}; use one of {', '.join(DIVIDERS)}")
        if self.ratio < 1 or self.kmeans_iterations < 1 or self.chunk_size < 1:
            raise ValueError("ratio, kmeans_iterations and chunk_size must be at least 1")
        if self.dims is not None and self.dims < 1:
            raise ValueError(f"dims must be at least 1 (got {self.dims})")

    @property
    def method(self) -> str:
        """``<reduce>+<divide>``, e.g. ``svd+kmeans``."""
        return f"{self.reduce}+{self.divide}"

    def dims_for(self, d: int) -> int:
        return self.dims if self.dims is not None else default_dims(self.reduce, d, self.ratio)


@dataclass(frozen=True)
class Aggregates:
    """Aggregated points of one partition, their classes and CSR membership.

    Members of point m are ``member_indices[member_offsets[m]:member_offsets[m + 1]]``: indices
    into the samples the points were built from, in that order. ``timings`` maps each step of
    :data:`STEPS` to seconds.
    """

    points: np.ndarray
    labels: np.ndarray
    member_offsets: np.ndarray
    member_indices: np.ndarray
    method: str
    timings: dict[str, float]
    ratio: int
    seed: int
    dims: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.member_offsets)

    @property
    def num_samples(self) -> int:
        return len(self.member_indices)

    def timings_json(self) -> str:
        return json.dumps(self.timings)


def build_aggregates(
    x: np.ndarray, y: np.ndarray, cfg: AggregateConfig, progress: Progress | None = None
) -> Aggregates:
    """Aggregate samples ``x`` (N, ...) with classes ``y`` (N,) as ``cfg`` says.

    ``progress`` is called with each step's name as it starts.
    """
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} samples but y has {len(y)} labels")
    if len(x) == 0:
        raise ValueError("no samples to aggregate")
    timings: dict[str, float] = {}
    dims = cfg.dims_for(int(np.prod(x.shape[1:])))

    def step(name: str) -> float:
        if progress is not None:
            progress(name)
        return time.perf_counter()

    t0 = step("reduce")
    z = reduce_features(x, cfg.reduce, dims, cfg.seed, cfg.chunk_size)
    t1 = step("divide")
    timings["reduce"] = t1 - t0
    ids = divide(
        z, y, cfg.divide, cfg.ratio, cfg.seed, cfg.kmeans_iterations, cfg.kmeans_flat_limit
    )
    t2 = step("aggregate")
    timings["divide"] = t2 - t1
    offsets, indices = membership(ids)
    points = member_means(x, offsets, indices)
    labels = subset_labels(y, offsets, indices)
    timings["aggregate"] = time.perf_counter() - t2
    return Aggregates(
        points=points,
        labels=labels,
        member_offsets=offsets,
        member_indices=indices,
        method=cfg.method,
        timings=timings,
        ratio=cfg.ratio,
        seed=cfg.seed,
        dims=int(z.shape[1]),
    )


def size_summary(sizes: np.ndarray, bins: int = 8) -> dict[str, Any]:
    """Min/median/mean/max of subset sizes and a histogram (integer bin edges)."""
    sizes = np.asarray(sizes)
    if len(sizes) == 0:
        return {"subsets": 0, "min": 0, "median": 0.0, "mean": 0.0, "max": 0, "histogram": []}
    lo, hi = int(sizes.min()), int(sizes.max())
    edges = np.unique(np.linspace(lo, hi + 1, bins + 1).astype(np.int64))
    counts, _ = np.histogram(sizes, bins=edges)
    hist = [
        {"from": int(a), "to": int(b) - 1, "count": int(c)}
        for a, b, c in zip(edges[:-1], edges[1:], counts, strict=True)
    ]
    return {
        "subsets": len(sizes),
        "min": lo,
        "median": float(np.median(sizes)),
        "mean": float(sizes.mean()),
        "max": hi,
        "histogram": hist,
    }
