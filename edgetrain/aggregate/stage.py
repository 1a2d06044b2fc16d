"""The aggregate stage: build and store each partition's aggregated points, and summarise them."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.aggregate.aggregates import STEPS, AggregateConfig, build_aggregates, size_summary
from edgetrain.aggregate.store import aggregates_path, write_aggregates
from edgetrain.data.dataset import Dataset

log = logging.getLogger(__name__)

UNPARTITIONED = "all"
StageProgress = Callable[[str, str], None]


@dataclass(frozen=True)
class Partition:
    """One worker's share of the training split: a name (worker index or ``all``) and indices."""

    name: str
    indices: np.ndarray


def partitions_of(parts: Sequence[np.ndarray] | None, n: int) -> list[Partition]:
    """``parts`` (one index array per worker) as named partitions; None: the whole set, ``all``."""
    if parts is None:
        return [Partition(UNPARTITIONED, np.arange(n, dtype=np.int64))]
    return [Partition(str(i), np.asarray(p, dtype=np.int64)) for i, p in enumerate(parts)]


def aggregate_stage(
    ds: Dataset,
    partitions: Sequence[Partition],
    cfg: AggregateConfig,
    run_dir: Path,
    progress: StageProgress | None = None,
) -> dict[str, Any]:
    """Aggregate each partition of ``ds``'s training split into ``RUN/data/aggregates-<p>.npz``.

    Only training samples are aggregated. ``progress(partition, step)`` is called as each step
    starts. Returns a JSON-ready summary: per partition its file, sizes and step timings, and
    the subset-size distribution over all partitions.
    """
    rows: list[dict[str, Any]] = []
    all_sizes: list[np.ndarray] = []
    for part in partitions:

        def on_step(step: str, name: str = part.name) -> None:
            if progress is not None:
                progress(name, step)

        agg = build_aggregates(ds.x_train[part.indices], ds.y_train[part.indices], cfg, on_step)
        meta = {
            "dataset": ds.name,
            "partition": part.name,
            "samples": len(part.indices),
            "input_shape": list(ds.input_shape),
            "classes": ds.classes,
            "reduce": cfg.reduce,
            "divide": cfg.divide,
        }
        agg = dataclasses.replace(agg, meta=meta)
        path = aggregates_path(run_dir, part.name)
        write_aggregates(path, agg)
        log.info(
            "%s: %d points from %d samples -> %s",
            part.name,
            len(agg.points),
            len(part.indices),
            path,
        )
        all_sizes.append(agg.sizes)
        rows.append(
            {
                "partition": part.name,
                "file": str(path),
                "samples": agg.num_samples,
                "points": len(agg.points),
                "dims": agg.dims,
                "sizes": size_summary(agg.sizes),
                "timings": {s: agg.timings[s] for s in STEPS},
                "total_s": sum(agg.timings.values()),
            }
        )
    return {
        "dataset": ds.name,
        "run_dir": str(run_dir),
        "method": cfg.method,
        "reduce": cfg.reduce,
        "divide": cfg.divide,
        "ratio": cfg.ratio,
        "seed": cfg.seed,
        "partitions": rows,
        "sizes": size_summary(np.concatenate(all_sizes) if all_sizes else np.zeros(0)),
    }
