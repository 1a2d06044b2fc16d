"""Figures from a run's accuracy curve (``summary["curve"]``: the workers' mean test accuracy
after each epoch, at its training second): time to a target, the accuracy at a budget, the
final accuracy. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def time_to(summary: Mapping[str, Any], target: float | None) -> float | None:
    """Training seconds until the workers' mean accuracy first reaches ``target``."""
    if target is None:
        return None
    for point in summary.get("curve", []):
        acc = point.get("test_accuracy")
        if acc is not None and acc >= target:
            return float(point["train_s"])
    return None


def accuracy_at(summary: Mapping[str, Any], budget: float | None) -> float | None:
    """The accuracy of the last epoch that ended within ``budget`` training seconds."""
    if budget is None:
        return None
    got = None
    for point in summary.get("curve", []):
        if point.get("train_s", math.inf) <= budget and point.get("test_accuracy") is not None:
            got = float(point["test_accuracy"])
    return got


def final_accuracy(summary: Mapping[str, Any]) -> Any:
    """The last epoch's accuracy that is there (None: none is)."""
    curve = summary.get("curve", [])
    return next((p["test_accuracy"] for p in reversed(curve) if p.get("test_accuracy")), None)
