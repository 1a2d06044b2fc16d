"""Open slots for new workers (``[run] join_slots = N``): the recipe's last N trainers are not
started with the run; each is a place a new worker takes by ``edgetrain join RUN --worker ID``
while the run trains, exactly as a lost worker comes back (:mod:`edgetrain.comm.rejoin`): it
fetches the live model (a gossip peer's, or the shards' current parameters) and enters at the
next epoch boundary. Until then the coordinator counts the slot as a worker that has left, of
kind ``vacant``, which no failure budget counts.

Only techniques whose runner says so (a true ``joins_new`` class attribute) take new workers:
GoSGD, whose alphas are relative, and the scheduled parameter-server techniques, whose shards
take a trainer's pushes from the iteration it enters at. The others plan per worker from the
start (EdgeGossip's shares, DLion's batches and links, Mercury's groups, a pipeline's stages).
Pure, apart from the registry lookup.
"""

from __future__ import annotations

from collections.abc import Sequence

from edgetrain.comm.rejoin import VACANT
from edgetrain.errors import RecipeError
from edgetrain.recipe import Recipe

__all__ = ["VACANT", "check_join_slots", "joining_techniques", "vacant_workers"]

SLOT_ROLE = "trainer"


def vacant_workers(roles: Sequence[str], slots: int) -> frozenset[int]:
    """The ids of the last ``slots`` workers of role ``trainer`` (``roles``: each worker's role
    in id order). Pure."""
    if slots <= 0:
        return frozenset()
    trainers = [i for i, r in enumerate(roles) if r == SLOT_ROLE]
    return frozenset(trainers[-slots:])


def joining_techniques() -> list[str]:
    """``family/technique`` of every technique that takes new workers."""
    from edgetrain.launch.restart import techniques_whose_runner

    return techniques_whose_runner("joins_new")


def check_join_slots(recipe: Recipe) -> None:
    """Refuse ``[run] join_slots`` a technique cannot take, or that leaves no trainer to start
    the run (one line, exit 2)."""
    slots = recipe.run.join_slots
    if slots == 0:
        return
    from edgetrain import techniques

    family, technique = recipe.train.family, recipe.train.technique
    runner = techniques.runner_factory(family, technique)
    if not getattr(runner, "joins_new", False):
        raise RecipeError(
            f"[run] join_slots = {slots}: a new worker cannot join a running {family}/{technique} "
            "run",
            f"set [run] join_slots = 0, or use {', '.join(joining_techniques())}",
        )
    from edgetrain.launch.restart import rejoin_blocker

    blocker = rejoin_blocker(recipe)
    if blocker is not None:
        raise RecipeError(
            f"[run] join_slots = {slots}: a new worker joins as a lost one rejoins, and {blocker}",
            "set [run] join_slots = 0, or change what keeps the run's workers from rejoining",
        )
    trainers = sum(r == SLOT_ROLE for r in recipe.role_names())
    if slots >= trainers:
        raise RecipeError(
            f"[run] join_slots = {slots} leaves none of the recipe's {trainers} trainers to start "
            "the run",
            f"set join_slots to at most {trainers - 1}, or add workers",
        )
