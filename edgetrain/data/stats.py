"""Statistics of a partition: sizes and class balance per part."""

from __future__ import annotations

from typing import Any

import numpy as np


def partition_stats(labels: np.ndarray, parts: list[np.ndarray], classes: int) -> dict[str, Any]:
    """Per part: size, class counts and fractions, label entropy, and the total-variation
    distance of its label distribution from the whole dataset's (0 = perfectly balanced)."""
    overall = np.bincount(labels, minlength=classes) / max(1, len(labels))
    out = []
    for i, idx in enumerate(parts):
        counts = np.bincount(labels[idx], minlength=classes)
        frac = counts / max(1, counts.sum())
        nz = frac[frac > 0]
        out.append(
            {
                "part": i,
                "size": int(len(idx)),
                "class_counts": counts.tolist(),
                "class_fractions": [round(float(f), 4) for f in frac],
                "label_entropy_bits": round(float(-(nz * np.log2(nz)).sum()), 4),
                "tv_distance": round(float(0.5 * np.abs(frac - overall).sum()), 4),
            }
        )
    return {"total": int(len(labels)), "classes": classes, "parts": out}
