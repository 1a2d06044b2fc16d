"""What every family plugs into: the worker-side :class:`Runner`, the launcher-side
:class:`Family` with its defaults, a technique's :class:`TechniqueSide` over them, and the
plain data between them (:class:`WorkerContext`, :class:`Roster`, from
:mod:`edgetrain.runtime.context`).

A run's processes each run one :class:`Runner`, built by the technique's factory from a
:class:`WorkerContext`: ``setup`` loads data and models and binds the family's sockets (their
endpoints go to the coordinator in ``ready``); ``run`` trains or serves from ``start`` until it
hands in its final state. The launcher asks the run's :class:`Family` for its coordination
policy and controller, combines the workers' final hand-ins into one model, and spreads a
checkpoint over the workers of a resumed run. The coordinator never looks inside a hand-in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from edgetrain.comm.control import Controller, CoordinationPolicy, Event, HandIn, Role
from edgetrain.errors import EdgetrainError
from edgetrain.runtime.context import Final, Member, Ready, Roster, RunRecord, WorkerContext
from edgetrain.runtime.predict import Prediction, Setting

__all__ = [
    "Family",
    "FamilyDefaults",
    "Final",
    "FinalModel",
    "HandInError",
    "Member",
    "Ready",
    "Roster",
    "Runner",
    "RunRecord",
    "TechniqueSide",
    "WorkerContext",
    "meta_float",
]

if TYPE_CHECKING:
    from pathlib import Path

    from edgetrain.recipe import Recipe
    from edgetrain.runtime.session import Session


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
    """The launcher side of a family: the default of every hook a technique may override.

    Every hook is declared; :class:`FamilyDefaults` gives the optional ones a default, so a
    family writes only what it does. A technique's :class:`TechniqueSide` overrides any of
    them for that technique alone (:mod:`edgetrain.runtime.side` composes the two)."""

    name: str

    def check(self, recipe: Recipe) -> None:
        """Refuse (with :class:`~edgetrain.errors.RecipeError`) what the schema cannot see."""
        ...

    def check_run_dir(self, recipe: Recipe, run_dir: Path | None) -> None:
        """Refuse what the run would read from its directory (a plan file) and cannot;
        ``run_dir`` is None when the launch makes a new directory."""
        ...

    def reads(self, recipe: Recipe) -> dict[str, str]:
        """The files the run reads from its directory, ``{relative path: the recipe key that
        names it}`` (``{"plans/vm.json": "[ps] plan"}``); launch says which of the files other
        commands left there it used and which it ignored."""
        ...

    def wire_load(self, recipe: Recipe, data_bytes: int) -> WireLoad:
        """What the run's messages carry beyond its model's state, for its message limits
        (:mod:`edgetrain.runtime.limits`); ``data_bytes``: the training split's bytes."""
        ...

    def policy(self, recipe: Recipe) -> CoordinationPolicy: ...

    def controller(self, recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> Controller:
        """The run's controller; ``run_dir`` is where the launch reads what other commands left
        (``plans/``, ``data/``, ``profiles/``) before anything starts."""
        ...

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

    def report(self, run: RunRecord) -> dict[str, Any] | None:
        """The technique's own figures for ``report/summary.{json,md}`` (plain data, with an
        optional ``markdown`` section), from the run's metrics rows; None: nothing to add."""
        ...

    def report_files(self, report_dir: Path, technique_report: Mapping[str, Any]) -> list[str]:
        """Files drawn into ``report_dir`` from the technique's report (names, relative)."""
        ...

    def predict(self, recipe: Recipe, setting: Setting) -> Prediction | None:
        """The cost model: the predicted iteration time with its parts on ``setting``'s
        devices and links; None where the technique has no cost model yet."""
        ...

    def layout(self, recipe: Recipe, slots: int) -> Sequence[tuple[str, int]] | None:
        """The workers a run of this technique would have on ``slots`` worker slots (one
        device each), as ``(role, count)`` groups in worker order, for ``edgetrain advise``;
        None: the family's default role on every slot. ValueError (naming why) where the
        technique cannot run on that many."""
        ...

    def traffic(self, recipe: Recipe) -> Sequence[tuple[int, int]] | None:
        """The pairs of workers (ids) the run's peer traffic flows between, each taken to
        carry an equal share of the predicted bytes (``edgetrain advise`` splits them by link
        class); None: every pair of workers."""
        ...


@dataclass(frozen=True)
class WireLoad:
    """What a run's messages carry beyond the model's state: activations of batches of
    ``batch`` samples, and ``extra_bytes`` more (a technique that swaps training data)."""

    batch: int
    extra_bytes: int = 0


class FamilyDefaults:
    """Defaults for a family's optional hooks: subclass it and write what the family does.

    ``check_run_dir`` and ``reads``: nothing read from the run directory; ``artifacts``: no files;
    ``report``: nothing added; ``report_files``: none; ``predict``: no cost model; ``layout``:
    the family's default role on every slot; ``traffic``: every pair of workers; ``planned``:
    nothing to write into the recipe; ``lr_factor``: the lr as the recipe gives it."""

    def check_run_dir(self, recipe: Recipe, run_dir: Path | None) -> None:
        return None

    def reads(self, recipe: Recipe) -> dict[str, str]:
        return {}

    def wire_load(self, recipe: Recipe, data_bytes: int) -> WireLoad:
        return WireLoad(recipe.train.batch_size)

    def artifacts(self, event: Event) -> dict[str, Any]:
        return {}

    def report(self, run: RunRecord) -> dict[str, Any] | None:
        return None

    def report_files(self, report_dir: Path, technique_report: Mapping[str, Any]) -> list[str]:
        return []

    def predict(self, recipe: Recipe, setting: Setting) -> Prediction | None:
        return None

    def layout(self, recipe: Recipe, slots: int) -> Sequence[tuple[str, int]] | None:
        return None

    def traffic(self, recipe: Recipe) -> Sequence[tuple[int, int]] | None:
        return None

    def planned(self, recipe: Recipe, setting: Setting) -> dict[str, dict[str, Any]] | None:
        return None

    def lr_factor(self, recipe: Recipe) -> float:
        return 1.0


@dataclass(frozen=True)
class TechniqueSide:
    """A technique's launcher side: the hooks it overrides over its family's, each with the
    signature of the :class:`Family` method of the same name (None: the family's).

    Each hook replaces the family's for this technique (a check that extends the family's
    calls the family's check itself). A registry entry names the object
    (``TechniqueSpec(side="package.module:SIDE")``)."""

    check: Callable[[Recipe], None] | None = None
    check_run_dir: Callable[[Recipe, Path | None], None] | None = None
    reads: Callable[[Recipe], dict[str, str]] | None = None
    wire_load: Callable[[Recipe, int], WireLoad] | None = None
    policy: Callable[[Recipe], CoordinationPolicy] | None = None
    controller: Callable[[Recipe, Sequence[Role], Path], Controller] | None = None
    artifacts: Callable[[Event], dict[str, Any]] | None = None
    final_model: Callable[[Recipe, Mapping[int, HandIn], Sequence[Role]], FinalModel] | None = None
    resume: Callable[[Recipe, Mapping[int, HandIn], Sequence[Role]], dict[int, HandIn]] | None = (
        None
    )
    report: Callable[[RunRecord], dict[str, Any] | None] | None = None
    report_files: Callable[[Path, Mapping[str, Any]], list[str]] | None = None
    predict: Callable[[Recipe, Setting], Prediction | None] | None = None
    layout: Callable[[Recipe, int], Sequence[tuple[str, int]] | None] | None = None
    traffic: Callable[[Recipe], Sequence[tuple[int, int]] | None] | None = None
    planned: Callable[[Recipe, Setting], dict[str, dict[str, Any]] | None] | None = None
    lr_factor: Callable[[Recipe], float] | None = None


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
