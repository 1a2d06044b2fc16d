"""Restarting dead workers (``[run] restart = N``): the back-off schedule and each worker's
budget, as pure bookkeeping on times the caller passes in, and the check that the run's
technique can take a restarted worker back.

A worker whose process exits before it handed in is started again after 1 s, then 2 s, 4 s ...
(at most :data:`MAX_BACKOFF_S`), at most N times; the restarted process rejoins the running run
(:mod:`edgetrain.comm.rejoin`). Nothing here starts a process or reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edgetrain.errors import RecipeError
from edgetrain.recipe import Recipe

BASE_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0


def backoff_s(attempt: int, base_s: float = BASE_BACKOFF_S, cap_s: float = MAX_BACKOFF_S) -> float:
    """Seconds to wait before restart number ``attempt`` (1, 2, ...): ``base_s * 2**(attempt-1)``,
    at most ``cap_s``. Pure."""
    if attempt < 1:
        raise ValueError(f"restart attempts count from 1 (got {attempt})")
    return min(cap_s, base_s * 2.0 ** min(attempt - 1, 62))


@dataclass
class RestartBook:
    """Each worker's restarts: how many it has used of ``limit``, and which are due when."""

    limit: int
    used: dict[int, int] = field(default_factory=dict)
    due_at: dict[int, float] = field(default_factory=dict)
    # restarted, and not seen to exit since: on its way back into the run
    started: set[int] = field(default_factory=set)
    # starts by ``edgetrain join`` (outside the budget)
    joins: dict[int, int] = field(default_factory=dict)

    def schedule(self, worker: int, now: float) -> float | None:
        """Plan the next restart of ``worker`` (its process exited at ``now``); the back-off in
        seconds, or None when its budget is spent (or one is already planned)."""
        self.started.discard(worker)
        if worker in self.due_at:
            return None
        attempt = self.used.get(worker, 0) + 1
        if attempt > self.limit:
            return None
        delay = backoff_s(attempt)
        self.due_at[worker] = now + delay
        return delay

    def due(self, now: float) -> list[int]:
        """Workers whose restart is due at ``now``, taken off the plan and counted as used."""
        ready = sorted(w for w, at in self.due_at.items() if at <= now)
        for w in ready:
            del self.due_at[w]
            self.used[w] = self.used.get(w, 0) + 1
            self.started.add(w)
        return ready

    def joined(self, worker: int) -> int:
        """``worker`` was started again by ``edgetrain join``: on its way back, outside the
        budget (any planned restart is off). Returns its joins so far."""
        self.due_at.pop(worker, None)
        self.started.add(worker)
        self.joins[worker] = self.joins.get(worker, 0) + 1
        return self.joins[worker]

    def back(self, worker: int) -> None:
        """``worker``'s new process re-entered the run: no longer on its way back."""
        self.started.discard(worker)

    def cancel(self, worker: int) -> None:
        self.due_at.pop(worker, None)

    @property
    def pending(self) -> set[int]:
        """Workers waiting for their restart."""
        return set(self.due_at)

    @property
    def mending(self) -> set[int]:
        """Workers waiting for their restart or restarted since they last exited: a failure
        the launcher is repairing."""
        return set(self.due_at) | self.started

    def attempt(self, worker: int) -> int:
        """Restarts used by ``worker`` so far."""
        return self.used.get(worker, 0)


def technique_rejoins(recipe: Recipe) -> bool:
    """Can a restarted worker of the recipe's technique rejoin a running run? A runner says it
    can with a true ``rejoins`` class attribute (and no :func:`rejoin_blocker` for the
    recipe)."""
    from edgetrain import techniques

    runner = techniques.runner_factory(recipe.train.family, recipe.train.technique)
    return bool(getattr(runner, "rejoins", False)) and rejoin_blocker(recipe) is None


def rejoin_blocker(recipe: Recipe) -> str | None:
    """What in the recipe keeps its technique's workers from rejoining (a runner's
    ``rejoin_blocker(recipe)``, e.g. no epoch barriers), or None."""
    from edgetrain import techniques

    runner = techniques.runner_factory(recipe.train.family, recipe.train.technique)
    blocker = getattr(runner, "rejoin_blocker", None)
    return blocker(recipe) if callable(blocker) else None


def restarted_roles(recipe: Recipe, fatal_roles: frozenset[str]) -> frozenset[str]:
    """The roles whose lost workers the launcher restarts: what the runner names
    (``restarts_roles``, e.g. a parameter-server shard rebuilt from the trainers), else every
    role but those the run cannot lose (``fatal_roles``: losing one stops the run)."""
    from edgetrain import techniques

    runner = techniques.runner_factory(recipe.train.family, recipe.train.technique)
    named = getattr(runner, "restarts_roles", None)
    if named is not None:
        return frozenset(named)
    return frozenset(r for r in recipe.role_names() if r not in fatal_roles)


def techniques_whose_runner(attribute: str) -> list[str]:
    """``family/technique`` of every technique whose runner has a true ``attribute``
    (``rejoins``, ``joins_new``)."""
    from edgetrain import techniques

    return [
        f"{fam.name}/{name}"
        for fam in techniques.families().values()
        for name in fam.techniques
        if getattr(techniques.runner_factory(fam.name, name), attribute, False)
    ]


def rejoining_techniques() -> list[str]:
    """``family/technique`` of every technique whose workers rejoin a running run."""
    return techniques_whose_runner("rejoins")


def check_restart(recipe: Recipe) -> None:
    """Refuse ``[run] restart > 0`` for a technique whose workers cannot rejoin a running run
    (one line, exit 2)."""
    if recipe.run.restart == 0 or technique_rejoins(recipe):
        return
    if rejoin_blocker(recipe) is not None:  # the technique's own check says why, in its terms
        return
    family, technique = recipe.train.family, recipe.train.technique
    raise RecipeError(
        f"[run] restart = {recipe.run.restart}: a restarted worker cannot rejoin a running "
        f"{family}/{technique} run yet",
        "set [run] restart = 0 (a lost worker stays lost; `launch --resume` restarts the "
        f"run from its last checkpoint), or use {', '.join(rejoining_techniques())}",
    )
