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
