"""Statistics of a partition: sizes and class balance per part, as plain JSON-able data."""

from __future__ import annotations

from typing import Any

import numpy as np


def _entropy_bits(frac: np.ndarray) -> float:
    nz = frac[frac > 0]
    return float(-(nz * np.log2(nz)).sum())


def partition_stats(labels: np.ndarray, parts: list[np.ndarray], classes: int) -> dict[str, Any]:
    """Per part: size, class counts and fractions, label entropy in bits, and the
    total-variation distance of its label distribution from the whole set's (0 = same mix,
    1 = disjoint classes). Top level: ``total``, ``classes``, ``parts`` and summary figures."""
    labels = np.asarray(labels)
    if len(labels) and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(f"labels must lie in 0..{classes - 1}")
    overall = np.bincount(labels, minlength=classes) / max(1, len(labels))
    out: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        counts = np.bincount(labels[np.asarray(part, dtype=np.int64)], minlength=classes)
        frac = counts / max(1, counts.sum())
        out.append(
            {
                "part": i,
                "size": int(len(part)),
                "class_counts": [int(c) for c in counts],
                "class_fractions": [round(float(f), 4) for f in frac],
                "classes_present": int((counts > 0).sum()),
                "label_entropy_bits": round(_entropy_bits(frac), 4),
                "tv_distance": round(float(0.5 * np.abs(frac - overall).sum()), 4),
            }
        )
    sizes = [int(len(part)) for part in parts]
    return {
        "total": int(len(labels)),
        "classes": int(classes),
        "max_entropy_bits": round(float(np.log2(classes)), 4) if classes > 0 else 0.0,
        "mean_tv_distance": round(float(np.mean([p["tv_distance"] for p in out])), 4)
        if out
        else 0.0,
        "size_min": min(sizes, default=0),
        "size_max": max(sizes, default=0),
        "parts": out,
    }
