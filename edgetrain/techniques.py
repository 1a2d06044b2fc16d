"""The technique registry: families, their techniques, roles and recipe sections, by name.

Everything here is plain data and import strings (``"module:attribute"``), so a recipe can be
validated, and ``edgetrain techniques`` can list what exists, without importing torch. Adding a
technique on an existing family is its module(s) (the runner and, where it does more on the
launcher side than its family, a ``TechniqueSide``), its recipe section and one
:class:`TechniqueSpec` line below; adding a family is a package with a ``family.py`` (the
launcher side's defaults), a torch-free ``config.py`` (its recipe section) and one
:class:`FamilySpec`. Other packages add techniques to a family with :func:`register_technique`.

Other packages add families at run time: ``EDGETRAIN_PLUGINS`` names modules (comma-separated)
that call :func:`register` when imported; worker processes inherit the variable, so a plugin
family trains like a built-in one.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from edgetrain.errors import RecipeError

PLUGINS_ENV = "EDGETRAIN_PLUGINS"


@dataclass(frozen=True)
class TechniqueSpec:
    """One technique: what its workers run, the roles a run may have, the sections it reads,
    and its launcher side (``"module:attr"`` of a ``TechniqueSide``; None: the family's)."""

    name: str
    runner: str  # "module:attr": a callable (WorkerContext) -> Runner, for every role
    roles: tuple[str, ...]
    sections: tuple[str, ...]
    summary: str
    side: str | None = None
    # the technique its paper measures it against, on the same family ("edgetrain advise"
    # says what one predicts over the other); None: a baseline itself
    baseline: str | None = None


@dataclass(frozen=True)
class FamilySpec:
    """One family of techniques sharing roles, a launcher side and a way to combine models."""

    name: str
    family: str  # "module:attr": the Family object (launcher side)
    roles: tuple[str, ...]
    default_role: str
    data_roles: tuple[str, ...]  # roles that train on a shard of the data, in role-index order
    sections: Mapping[str, str]  # recipe section -> "module:Model" (torch-free pydantic model)
    techniques: Mapping[str, TechniqueSpec]
    summary: str
    # Host label a role prefers in a hosts file (PS servers on hosts labelled "ps").
    placement: Mapping[str, str] = field(default_factory=dict)
    # Its workers can keep epoch-end snapshots and score them after training
    # ([train] eval_deferred, edgetrain.runtime.snapshots).
    deferred_eval: bool = False

    @property
    def default_technique(self) -> str:
        return next(iter(self.techniques))


FAMILIES: dict[str, FamilySpec] = {
    "gossip": FamilySpec(
        name="gossip",
        family="edgetrain.gossip.family:FAMILY",
        deferred_eval=True,
        roles=("trainer",),
        default_role="trainer",
        data_roles=("trainer",),
        sections={
            "gossip": "edgetrain.gossip.config:GossipSection",
            "edgegossip": "edgetrain.gossip.config:EdgeGossipSection",
            "dlion": "edgetrain.gossip.config:DLionSection",
            "gaia": "edgetrain.gossip.config:GaiaSection",
            "ako": "edgetrain.gossip.config:AkoSection",
        },
        techniques={
            "gosgd": TechniqueSpec(
                "gosgd",
                "edgetrain.gossip.gosgd:GoSGD",
                ("trainer",),
                ("gossip",),
                "GoSGD: local SGD, push weights and half the mixing weight to a random peer",
            ),
            "edgegossip": TechniqueSpec(
                "edgegossip",
                "edgetrain.gossip.edgegossip.runner:EdgeGossip",
                ("trainer",),
                ("gossip", "edgegossip"),
                "EdgeGossip: GoSGD with per-epoch data shares r_i balanced on predicted speed, "
                "loss-ranked aggregated subsets",
                side="edgetrain.gossip.edgegossip.side:SIDE",
                baseline="gosgd",
            ),
            "dlion": TechniqueSpec(
                "dlion",
                "edgetrain.gossip.exchange.dlion:DLion",
                ("trainer",),
                ("gossip", "dlion"),
                "DLion: capacity-aware batches, adaptive LR/BS, partial gradients per link, "
                "weight exchange",
                side="edgetrain.gossip.exchange.dlion:SIDE",
                baseline="gaia",
            ),
            "gaia": TechniqueSpec(
                "gaia",
                "edgetrain.gossip.exchange.gaia:Gaia",
                ("trainer",),
                ("gossip", "gaia"),
                "Gaia (DLion's baseline): significance-filtered updates, a server per site",
                side="edgetrain.gossip.exchange.gaia:SIDE",
            ),
            "ako": TechniqueSpec(
                "ako",
                "edgetrain.gossip.exchange.ako:Ako",
                ("trainer",),
                ("gossip", "ako"),
                "Ako (DLion's baseline): one of p gradient partitions to every peer per iteration",
                side="edgetrain.gossip.exchange.ako:SIDE",
            ),
        },
        summary="decentralised training: every worker keeps a replica and exchanges with peers",
    ),
}

FAMILIES["ps"] = FamilySpec(
    name="ps",
    family="edgetrain.ps.family:FAMILY",
    roles=("trainer", "server"),
    default_role="trainer",
    data_roles=("trainer",),
    sections={
        "ps": "edgetrain.ps.config:PsSection",
        "mercury": "edgetrain.ps.mercury.config:MercurySection",
    },
    techniques={
        **{
            name: TechniqueSpec(
                name,
                "edgetrain.ps.scheduled:make_runner",
                ("trainer", "server"),
                ("ps",),
                summary,
                baseline=None if name == "sequential" else "sequential",
            )
            for name, summary in (
                ("sequential", "parameter server: pull everything, compute, push everything"),
                ("lbl", "parameter server: every layer its own pull and push (Poseidon, WFBP)"),
                (
                    "ibatch",
                    "parameter server: iBatch's greedy forward segments, pushes layer by layer",
                ),
                (
                    "dynacomm",
                    "parameter server: DynaComm's optimal segments, re-planned every epoch",
                ),
            )
        },
        # Mercury: every process is a device, role "trainer", that also serves one shard of
        # the flat parameter vector from its own process (no "server" processes).
        "mercury": TechniqueSpec(
            "mercury",
            "edgetrain.ps.mercury.device:make_runner",
            ("trainer",),
            ("mercury",),
            side="edgetrain.ps.mercury.side:SIDE",
            summary="Mercury: every trainer also a shard server; group-wise importance sampling, "
            "importance-aware resharding, BACC scheduler",
            baseline="multips-sgd",
        ),
        "multips-sgd": TechniqueSpec(
            "multips-sgd",
            "edgetrain.ps.mercury.device:make_runner",
            ("trainer",),
            ("mercury",),
            side="edgetrain.ps.mercury.side:SIDE",
            summary="standard distributed SGD on Mercury's multi-server layout: uniform sampling, "
            "every trainer a shard server (Mercury's baseline)",
        ),
    },
    summary="parameter-server shards hold the model; trainers pull weights and push gradients",
    placement={"server": "ps"},
)

FAMILIES["pipeline"] = FamilySpec(
    name="pipeline",
    family="edgetrain.pipeline.family:FAMILY",
    roles=("stage", "replica", "evaluator"),
    default_role="stage",
    data_roles=(),  # stage 0 (every replica) draws from the whole split; labels ride along
    sections={"pipeline": "edgetrain.pipeline.config:PipelineSection"},
    techniques={
        name: TechniqueSpec(
            name,
            f"edgetrain.pipeline.{name}:make_runner",
            roles,
            ("pipeline",),
            summary,
            side=f"edgetrain.pipeline.{name}:SIDE" if own_side else None,
            baseline={"local": None, "mcpipe": "pipedream"}.get(name, "local"),
        )
        # name, roles, whether its module declares a side, summary
        for name, roles, own_side, summary in (
            ("local", ("stage", "evaluator"), True, "the whole model on one process (baseline)"),
            (
                "dataparallel",
                ("replica", "evaluator"),
                True,
                "replicas on slices of each microbatch, gradients summed over ZeroMQ",
            ),
            (
                "pipedream",
                ("stage", "evaluator"),
                False,
                "1F1B pipeline stages with weight stashing (a version per microbatch in flight)",
            ),
            (
                "greedy",
                ("stage", "evaluator"),
                False,
                "1F1B pipeline stages with one weight copy, updated as soon as possible",
            ),
            (
                "mcpipe",
                ("stage", "evaluator"),
                False,
                "1F1B pipeline stages keeping one version plus (input, error) pairs",
            ),
        )
    },  # fmt: skip
    summary="model parallelism: stages hold contiguous units; activations and errors flow",
)

_lock = threading.Lock()
_plugins_loaded: set[str] = set()
_generation = 0


def register(spec: FamilySpec) -> None:
    """Add (or replace) a family, e.g. from a plugin module named in ``EDGETRAIN_PLUGINS``."""
    global _generation
    with _lock:
        FAMILIES[spec.name] = spec
        _generation += 1


def register_technique(family: str, spec: TechniqueSpec, sections: Mapping[str, str]) -> None:
    """Add (or replace) a technique on an existing family, with the recipe sections it brings
    (``{section: "module:Model"}``), e.g. from a plugin module named in ``EDGETRAIN_PLUGINS``."""
    global _generation
    with _lock:
        fam = FAMILIES.get(family)
        if fam is None:
            raise RecipeError(
                f"a plugin adds technique '{spec.name}' to family '{family}', which is not "
                "registered",
                f"known families: {', '.join(FAMILIES)}",
            )
        FAMILIES[family] = replace(
            fam,
            sections={**fam.sections, **sections},
            techniques={**fam.techniques, spec.name: spec},
        )
        _generation += 1


def generation() -> int:
    """A number that changes whenever the registry does (for caches built from it)."""
    _load_plugins()
    return _generation


def _load_plugins() -> None:
    names = [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    for name in names:
        if name in _plugins_loaded:
            continue
        _plugins_loaded.add(name)
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise RecipeError(
                f"{PLUGINS_ENV} names module '{name}', which cannot be imported ({exc})",
                f"fix or unset {PLUGINS_ENV}",
            ) from None


def families() -> dict[str, FamilySpec]:
    """Every registered family, plugins included."""
    _load_plugins()
    return dict(FAMILIES)


def known() -> str:
    """``gossip: gosgd; ps: ...``: every family and its techniques, for messages."""
    return "; ".join(f"{f.name}: {', '.join(f.techniques)}" for f in families().values())


def family_spec(name: str) -> FamilySpec:
    spec = families().get(name)
    if spec is None:
        raise RecipeError(f"unknown family '{name}'", f"known families and techniques: {known()}")
    return spec


def technique_spec(family: str, technique: str) -> TechniqueSpec:
    fam = family_spec(family)
    spec = fam.techniques.get(technique)
    if spec is None:
        raise RecipeError(
            f"'{technique}' is not a technique of the {family} family",
            f"known families and techniques: {known()}",
        )
    return spec


def family_of(technique: str) -> str | None:
    """The family a technique name belongs to (None if no family has it)."""
    for fam in families().values():
        if technique in fam.techniques:
            return fam.name
    return None


def section_models() -> dict[str, type[Any]]:
    """Every family's recipe sections, name -> pydantic model (imports only config modules)."""
    out: dict[str, type[Any]] = {}
    for fam in families().values():
        for name, target in fam.sections.items():
            out[name] = resolve(target)
    return out


def resolve(target: str) -> Any:
    """Import ``"module:attr"`` and return the attribute."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def load_family(name: str) -> Any:
    """The :class:`~edgetrain.runtime.base.Family` object of a family (imports its package)."""
    return resolve(family_spec(name).family)


def runner_factory(family: str, technique: str) -> Any:
    """The callable that builds a worker's runner for this technique."""
    return resolve(technique_spec(family, technique).runner)


def describe() -> list[dict[str, Any]]:
    """The registry as plain data (``edgetrain techniques --format json``)."""
    return [
        {
            "family": fam.name,
            "summary": fam.summary,
            "roles": list(fam.roles),
            "default_role": fam.default_role,
            "placement": dict(fam.placement),
            "sections": sorted(fam.sections),
            "techniques": [
                {
                    "name": t.name,
                    "summary": t.summary,
                    "roles": list(t.roles),
                    "sections": list(t.sections),
                    "side": t.side,
                    "recipe": f'[train] family = "{fam.name}", technique = "{t.name}"',
                }
                for t in fam.techniques.values()
            ],
        }
        for fam in families().values()
    ]
