"""EdgeGossip's Fig. 3: each combination's generation time and its points' training accuracy."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.aggregate.aggregates import STEPS, AggregateConfig, build_aggregates
from edgetrain.data.dataset import Dataset, derive_seed

log = logging.getLogger(__name__)

# The paper's eight combinations, in its order (reduce, divide), and the per-sample SVD beside
# the whole-dataset one: the paper's "SVD" is very likely per sample (its Table 3 cost), so
# svd-sample+kmeans is its technique 1 as edgetrain reads it, svd+kmeans the other reading.
COMBINATIONS: tuple[tuple[str, str], ...] = (
    ("svd", "gmm"),
    ("pca", "kmeans"),
    ("pca", "lsh"),
    ("svd", "lsh"),
    ("svd", "kmeans"),
    ("svd-sample", "kmeans"),
    ("isvd", "lsh"),
    ("hash", "kmeans"),
    ("histogram", "kmeans"),
)
SELECTED = ("svd+kmeans", "svd-sample+kmeans", "isvd+lsh", "hash+kmeans")
BASELINE = "all data"
_SALT_INIT = 0xF16


@dataclass(frozen=True)
class TrainSettings:
    """A short, deterministic SGD run: model from the zoo, epochs, batch size, optimiser."""

    model: str = "lenet5"
    epochs: int = 20
    batch_size: int = 32
    lr: float = 0.01
    momentum: float = 0.9
    seed: int = 0


def train_and_test(
    x: np.ndarray, y: np.ndarray, ds: Dataset, settings: TrainSettings
) -> tuple[float, float]:
    """Train ``settings.model`` on ``(x, y)`` from a seeded init; test accuracy and seconds."""
    import torch

    from edgetrain.models.zoo import build_model
    from edgetrain.recipe import TrainSection
    from edgetrain.runtime.trainer import LocalTrainer

    torch.manual_seed(derive_seed(settings.seed, _SALT_INIT))
    model = build_model(settings.model, ds.input_shape, ds.classes)
    cfg = TrainSection(
        epochs=settings.epochs,
        batch_size=settings.batch_size,
        lr=settings.lr,
        momentum=settings.momentum,
    )
    trainer = LocalTrainer(model, x, y, ds.x_test, ds.y_test, cfg, settings.seed, worker_id=0)
    t0 = time.perf_counter()
    for epoch in range(settings.epochs):
        for xb, yb in trainer.batches(epoch):
            trainer.step(xb, yb)
    seconds = time.perf_counter() - t0
    return trainer.evaluate()[0], seconds


def _row(
    method: str, points: int, timings: dict[str, float] | None, acc: float, train_s: float
) -> dict[str, Any]:
    return {
        "method": method,
        "selected": method in SELECTED,
        "points": points,
        "timings": timings,
        "generation_s": sum(timings.values()) if timings else None,
        "accuracy": acc,
        "train_s": train_s,
    }


def compare(
    ds: Dataset,
    settings: TrainSettings,
    ratio: int = 10,
    combinations: Sequence[tuple[str, str]] = COMBINATIONS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """For each combination: build points on ``ds``'s training split, train on them only, test.

    A last row trains on all the original training samples, for reference.
    """
    rows: list[dict[str, Any]] = []
    for reduce, divide in combinations:
        cfg = AggregateConfig(reduce=reduce, divide=divide, ratio=ratio, seed=settings.seed)
        if progress is not None:
            progress(cfg.method)
        agg = build_aggregates(ds.x_train, ds.y_train, cfg)
        acc, train_s = train_and_test(agg.points, agg.labels, ds, settings)
        log.info("%s: %d points, accuracy %.4f", cfg.method, len(agg.points), acc)
        rows.append(
            _row(cfg.method, len(agg.points), {s: agg.timings[s] for s in STEPS}, acc, train_s)
        )
    if progress is not None:
        progress(BASELINE)
    acc, train_s = train_and_test(ds.x_train, ds.y_train, ds, settings)
    rows.append(_row(BASELINE, len(ds.y_train), None, acc, train_s))
    return {
        "dataset": ds.name,
        "train_samples": len(ds.y_train),
        "test_samples": len(ds.y_test),
        "ratio": ratio,
        "model": settings.model,
        "epochs": settings.epochs,
        "batch_size": settings.batch_size,
        "lr": settings.lr,
        "seed": settings.seed,
        "rows": rows,
    }


def plot_comparison(report: dict[str, Any], path: Path) -> Path:
    """A two-panel PNG: generation time per step (stacked, log scale) and test accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from edgetrain.rundir import atomic_write_bytes

    rows = [r for r in report["rows"] if r["timings"] is not None]
    names = [r["method"] for r in rows]
    fig, (ax_t, ax_a) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    floor = 1e-3  # log axis: bars start here
    left = np.full(len(rows), floor)
    for step, colour in zip(STEPS, ("#4c72b0", "#dd8452", "#55a868"), strict=True):
        widths = np.array([r["timings"][step] for r in rows])
        ax_t.barh(names, widths, left=left, color=colour, label=step)
        left += widths
    ax_t.set_xlabel("generation time (s)")
    ax_t.set_xscale("log")
    ax_t.set_xlim(left=floor)
    ax_t.invert_yaxis()
    ax_t.legend(fontsize=8)
    accs = [r["accuracy"] for r in rows]
    colours = ["#c44e52" if r["selected"] else "#8c8c8c" for r in rows]
    ax_a.barh(names, accs, color=colours)
    base = [r["accuracy"] for r in report["rows"] if r["timings"] is None]
    if base:
        ax_a.axvline(base[0], color="black", ls="--", lw=1, label=f"all data ({base[0]:.3f})")
        ax_a.legend(fontsize=8, loc="lower left")
    ax_a.set_xlabel("test accuracy (model trained on aggregated points only)")
    ax_a.set_xlim(0, 1)
    ax_a.invert_yaxis()
    ax_a.set_yticklabels([])
    fig.suptitle(
        f"{report['dataset']}: ratio {report['ratio']}, {report['model']}, "
        f"{report['epochs']} epochs (red: the paper's selected combinations, SVD read both ways)",
        fontsize=10,
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path
