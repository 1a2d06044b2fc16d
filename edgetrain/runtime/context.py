"""The plain data a run lives on: who is in it (:class:`Roster` of :class:`Member`), what a
worker's runner is built from (:class:`WorkerContext`), what it reports once set up
(:class:`Ready`) and at its end (:class:`Final`), and what the run leaves for its report
(:class:`RunRecord`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgetrain.comm.control import HandIn, Role
from edgetrain.comm.wire import DEFAULT_LIMITS, Limits

if TYPE_CHECKING:
    import zmq

    from edgetrain.comm.channel import Traffic
    from edgetrain.comm.security import CurveKeys
    from edgetrain.recipe import Recipe


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
    limits: Limits = DEFAULT_LIMITS  # the run's message limits (every socket, every receipt)

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


@dataclass(frozen=True)
class RunRecord:
    """What a run left for its report: the manifest, each worker's metrics rows (by worker
    id) and the coordinator's."""

    manifest: dict[str, Any]
    workers: Mapping[int, list[dict[str, Any]]]
    coordinator: list[dict[str, Any]]
