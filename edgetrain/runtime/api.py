"""The contract a family or technique author imports: every type and function a family needs,
from one module, and nothing else.

The launcher side: :class:`Family` (the family's defaults, with :class:`FamilyDefaults` for
the optional hooks), a technique's :class:`TechniqueSide` over it, the coordinator's contracts
(:class:`Role`, :class:`HandIn`, :class:`Decision`, :class:`Controller`,
:class:`CoordinationPolicy`, :class:`Event`), the run's :class:`FinalModel` and the
:class:`RunRecord` its report reads. A recipe
section: :class:`Section` (read typed with ``Model.of(recipe)``). The cost model's data:
:class:`Setting` (:class:`Device`, :class:`Link`, :class:`Layer`) and :class:`Prediction`.
The worker side: :class:`Runner`, built from a :class:`WorkerContext`,
reporting :class:`Ready` and :class:`Final`, driven through a :class:`Session` (and, for an
epoch loop, :class:`EpochWork` with :func:`run_epochs`; :data:`Serve`: the sockets it serves
while it waits).
"""

from __future__ import annotations

from edgetrain.comm.client import Serve
from edgetrain.comm.control import (
    Controller,
    CoordinationPolicy,
    Decision,
    Event,
    HandIn,
    Role,
)
from edgetrain.runtime.base import (
    Family,
    FamilyDefaults,
    FinalModel,
    HandInError,
    Runner,
    TechniqueSide,
    WireLoad,
    meta_float,
)
from edgetrain.runtime.context import Final, Member, Ready, Roster, RunRecord, WorkerContext
from edgetrain.runtime.epochs import EpochWork, run_epochs
from edgetrain.runtime.predict import Device, Layer, Link, Prediction, Setting
from edgetrain.runtime.session import Session
from edgetrain.section import Section

__all__ = [
    "Controller",
    "CoordinationPolicy",
    "Decision",
    "Device",
    "EpochWork",
    "Event",
    "Family",
    "FamilyDefaults",
    "Final",
    "FinalModel",
    "HandIn",
    "HandInError",
    "Layer",
    "Link",
    "Member",
    "Prediction",
    "Ready",
    "Role",
    "Roster",
    "Runner",
    "RunRecord",
    "Section",
    "Serve",
    "Session",
    "Setting",
    "TechniqueSide",
    "WireLoad",
    "WorkerContext",
    "meta_float",
    "run_epochs",
]
