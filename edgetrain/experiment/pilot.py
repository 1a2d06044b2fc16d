"""The pilot: a seed of its own, run before any measured seed and reported, that fixes what a
reproduction must not tune afterwards (targets, a learning rate, a batch, a budget). Its seed
is never one of the measured ones. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from edgetrain.errors import EdgetrainError

PILOT_SEED = 0
"""The pilot's seed; measured seeds start at 1."""


def below(figure: float, points: float, digits: int = 4) -> float:
    """A target ``points`` (a fraction: 0.01 is one point) below a pilot's ``figure``,
    rounded to ``digits``."""
    return round(figure - points, digits)


def refuse_diverged(finals: Mapping[str, float | None], chance: float, fix: str) -> None:
    """Refuse a pilot whose final accuracy ended near ``chance``: it diverged, and a target
    fixed from it would mean nothing."""
    for arm, a in finals.items():
        if a is not None and a < chance:
            raise EdgetrainError(
                f"the pilot's {arm} ended at accuracy {a:.3f}, near chance (10 classes): it "
                f"diverged, and a target fixed from it would mean nothing; {fix}"
            )


Curve = list[list[float]]  # [[train_s, accuracy], ...] as a pilot keeps it
RISING = 0.5  # targets at the accuracy a pilot had at half its training time
UNDER_PLATEAU = 0.005  # ... and at least half a point under the lowest pilot's plateau


def accuracy_when(curve: Curve, t: float) -> float:
    """The accuracy of the last point at or before ``t`` training seconds (the first point's
    when none is); ``curve`` without gaps."""
    got = curve[0][1]
    for when, acc in curve:
        if when <= t:
            got = acc
    return float(got)


def plateau(curve: Curve) -> float:
    """A pilot's plateau: its best accuracy over the second half of its training time."""
    end = max(t for t, _ in curve)
    return float(max(a for t, a in curve if t >= end / 2))


def rising_target(curves: Mapping[str, Curve]) -> float:
    """A target on the rising curve that every pilot reaches: the lowest accuracy any of
    ``curves`` (by arm) had at half its training time, and at least half a point under the
    lowest of their plateaus. One lucky pilot cannot put it where another arm levels off: the
    lowest sets it."""
    known = [c for c in curves.values() if c]
    if not known:
        raise EdgetrainError("the pilot runs ended without an accuracy; no target to fix")
    rising = min(accuracy_when(c, RISING * max(t for t, _ in c)) for c in known)
    return min(rising, min(plateau(c) for c in known) - UNDER_PLATEAU)


def curve_of(summary: Mapping[str, object]) -> Curve:
    """A run summary's curve as [[train_s, accuracy], ...], the points with both."""
    points = summary.get("curve") or []
    assert isinstance(points, list)
    return [
        [float(p["train_s"]), float(p["test_accuracy"])]
        for p in points
        if p.get("train_s") is not None and p.get("test_accuracy") is not None
    ]


def mean_accuracy(curve: Curve) -> float | None:
    """A pilot's mean accuracy over its evaluations (the area under its curve per epoch): high
    for a run that rises early and stays up, lower for one that collapses mid-way and climbs
    back to the same final (None without a point)."""
    points = [acc for _, acc in curve]
    return sum(points) / len(points) if points else None
