"""What every family plugs into: the worker-side :class:`Runner`, the launcher-side
:class:`Family`, and the plain data between them (:class:`WorkerContext`, :class:`Roster`).

A run's processes each run one :class:`Runner`, built by the technique's factory from a
:class:`WorkerContext`: ``setup`` loads data and models and binds the family's sockets (their
endpoints go to the coordinator in ``ready``); ``run`` trains or serves from ``start`` until it
hands in its final state. The launcher asks the run's :class:`Family` for its coordination
policy and controller, combines the workers' final hand-ins into one model, and spreads a
checkpoint over the workers of a resumed run. The coordinator never looks inside a hand-in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from edgetrain.comm.control import Controller, CoordinationPolicy, HandIn, Role
from edgetrain.errors import EdgetrainError

if TYPE_CHECKING:
    from pathlib import Path

    import zmq

    from edgetrain.comm.channel import Traffic
    from edgetrain.comm.coordinator import Event
    from edgetrain.comm.security import CurveKeys
    from edgetrain.recipe import Recipe
    from edgetrain.runtime.session import Session


@dataclass(frozen=True)
class Member:
    """One process of the run as the others see it: role, host, site and endpoints."""

    id: int
    role: Role
    host: str
    site: str | None
    endpoints: Mapping[str, str]


@dataclass(frozen=True)
class Roster:
    """Every process still in the run when training starts (the ``start`` message)."""

    members: Mapping[int, Member]

    @classmethod
    def from_meta(cls, meta: object) -> Roster:
        """Parse ``start``'s roster; anything malformed is left out."""
        members: dict[int, Member] = {}
        if isinstance(meta, dict):
            for key, entry in meta.items():
                if not str(key).isdigit() or not isinstance(entry, dict):
                    continue
                endpoints = entry.get("endpoints", {})
                role, index = entry.get("role"), entry.get("index")
                if not isinstance(role, str) or not isinstance(index, int):
                    continue
                if not isinstance(endpoints, dict):
                    continue
                site = entry.get("site")
                members[int(key)] = Member(
                    int(key),
                    Role(role, index),
                    str(entry.get("host", "")),
                    site if isinstance(site, str) else None,
                    {str(k): str(v) for k, v in endpoints.items()},
                )
        return cls(members)

    def of(self, role: str) -> list[Member]:
        """The members with ``role``, in role-index order."""
        return sorted(
            (m for m in self.members.values() if m.role.name == role), key=lambda m: m.role
        )

    def endpoints(self, role: str, name: str) -> dict[int, str]:
        """Worker id -> its endpoint ``name``, for every member with ``role`` that has one."""
        return {m.id: m.endpoints[name] for m in self.of(role) if name in m.endpoints}


@dataclass
class WorkerContext:
    """Everything a runner is built from: the recipe, who it is, and how to talk."""

    recipe: Recipe
    run_id: str
    worker_id: int
    role: Role
    host: str
    zmq: zmq.SyncContext
    traffic: Traffic
    keys: CurveKeys | None = None
    bind_host: str = "127.0.0.1"
    announce_host: str | None = None
    resume: HandIn | None = None
    resume_epoch: int = 0

    @property
    def start_epoch(self) -> int:
        return self.resume_epoch + 1


@dataclass(frozen=True)
class Ready:
    """A runner's report once set up: the endpoints it bound, and facts for the controller."""

    endpoints: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Final:
    """A runner's end: its hand-in, and metrics for the run's record."""

    handin: HandIn
    metrics: dict[str, Any] = field(default_factory=dict)


class Runner(Protocol):
    """The worker side of a technique, for one role."""

    def setup(self) -> Ready:
        """Load data and models, restore a resumed state, bind sockets. Runs before ``start``."""
        ...

    def run(self, session: Session) -> Final:
        """Train (or serve) from ``start`` to the end; return the final hand-in."""
        ...

    def close(self) -> None:
        """Close sockets; called once, however the worker ends."""
        ...


@dataclass(frozen=True)
class FinalModel:
    """The run's model, combined from the workers' hand-ins, with facts about how.

    ``event`` names the coordinator event that records it (the gossip family keeps
    ``averaged``); ``info`` goes into that event and the summary."""

    weights: dict[str, np.ndarray]
    info: dict[str, Any] = field(default_factory=dict)
    event: str = "final_model"


class Family(Protocol):
    """The launcher side of a family."""

    name: str

    def check(self, recipe: Recipe) -> None:
        """Refuse (with :class:`~edgetrain.errors.RecipeError`) what the schema cannot see."""
        ...

    def policy(self, recipe: Recipe) -> CoordinationPolicy: ...

    def controller(self, recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> Controller:
        """The run's controller; ``run_dir`` is where the launch reads what other commands left
        (``plans/``, ``data/``, ``profiles/``) before anything starts."""
        ...

    # Optional, looked up with getattr by the report:
    #   report(manifest, worker_rows: {id: [rows]}, coordinator_rows) -> dict | None
    # adds a family's own figures (and a "markdown" section) to report/summary.{json,md}.
    # Optional, looked up with getattr by launch before the run directory is written:
    #   check_run_dir(recipe, run_dir: Path | None) -> None
    # refuses (RecipeError) what the run would read from its directory (a plan file) and
    # cannot; ``run_dir`` is None when the launch makes a new directory.

    def artifacts(self, event: Event) -> dict[str, Any]:
        """Files to write into the run directory for an event, ``{relative path: JSON}`` (a
        re-plan per epoch, say); the launcher writes them atomically. Most families: ``{}``."""
        ...

    def final_model(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> FinalModel:
        """Combine the final hand-ins (of the workers that finished) into one model."""
        ...

    def resume(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> dict[int, HandIn]:
        """A hand-in for every worker of a resumed run, from a checkpoint's hand-ins."""
        ...


class HandInError(EdgetrainError):
    """A hand-in whose content the family cannot use."""


def meta_float(handin: HandIn, key: str, worker: int) -> float:
    """A finite, non-negative number from a hand-in's metadata, or :class:`HandInError`."""
    value = handin.meta.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
        raise HandInError(f"worker {worker}'s hand-in has no valid '{key}' (got {value!r})")
    if value == float("inf"):
        raise HandInError(f"worker {worker}'s hand-in has an infinite '{key}'")
    return float(value)
