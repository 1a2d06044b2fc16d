"""Each technique's run on an environment: its recipe (the user's, with the technique and its
workers changed), the host each worker would run on, and the cost model's setting. Pure: the
recipe is validated in memory, nothing is read or started.

Workers: the user's own ``[[workers]]`` where they fit the hosts' slots and the technique
accepts them (its roles, its family's check), else the technique's ``layout`` hook on the
slots (a trainer per slot for gossip and Mercury, one server and trainers for the scheduled
parameter servers, a stage per slot for a pipeline, one stage for Local). Placement: as launch
places workers (:func:`edgetrain.launch.placement.place`: labels, then the family's preferred
label, then in order); a technique with fewer workers than slots takes the fastest hosts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from edgetrain import techniques
from edgetrain.advise.environment import Environment
from edgetrain.errors import EdgetrainError
from edgetrain.recipe import Recipe, parse_recipe
from edgetrain.runtime.predict import Layer, Setting
from edgetrain.runtime.setting_build import setting_on_hosts

__all__ = ["Candidate", "candidate", "chosen_techniques", "hosts_for", "recipe_text"]


@dataclass(frozen=True)
class Candidate:
    """One technique as it would run here: its recipe, each worker's host, its setting;
    ``error``: why it cannot run here (then the rest is None)."""

    family: str
    technique: str
    recipe: Recipe | None = None
    hosts: tuple[str, ...] = ()
    setting: Setting | None = None
    error: str | None = None

    @property
    def roles(self) -> tuple[str, ...]:
        """Each worker's role, in worker order (none without a recipe)."""
        return tuple(self.recipe.role_names()) if self.recipe is not None else ()


def chosen_techniques(recipe: Recipe, names: Sequence[str] | None) -> list[tuple[str, str]]:
    """(family, technique) pairs: ``names`` (each known, or EdgetrainError), else every
    registered technique, the recipe's family first."""
    fams = techniques.families()
    if names:
        out = []
        for name in names:
            fam = techniques.family_of(name)
            if fam is None:
                raise EdgetrainError(
                    f"--techniques: '{name}' is not a technique",
                    f"known: {', '.join(t for f in fams.values() for t in f.techniques)}",
                )
            if (fam, name) not in out:
                out.append((fam, name))
        return out
    order = [recipe.train.family] + [f for f in fams if f != recipe.train.family]
    return [(f, t) for f in order for t in fams[f].techniques]


def candidate(
    recipe: Recipe,
    family: str,
    technique: str,
    env: Environment,
    layers: Sequence[Layer],
    side: Any = None,
) -> Candidate:
    """``technique`` on ``env``: its recipe, placement and setting, or why not (``side``: its
    composed launcher side, when the caller has it)."""
    from edgetrain.runtime.side import launcher_side

    side = side or launcher_side(family, technique)
    slots = env.slots
    own = _own_recipe(recipe, family, technique, slots, side)
    if own is None:
        try:
            groups = side.layout(recipe, slots)
        except ValueError as exc:
            return Candidate(family, technique, error=str(exc))
        if groups is None:
            groups = [(techniques.family_spec(family).default_role, slots)]
        try:
            own = _recipe_with(recipe, family, technique, groups, side)
        except EdgetrainError as exc:
            return Candidate(family, technique, error=exc.problem)
    try:
        hosts = tuple(place_workers(own, env))
    except EdgetrainError as exc:
        return Candidate(family, technique, own, error=exc.problem)
    setting = setting_on_hosts(
        env.facts, hosts, layers, reference_cpu=env.reference_cpu, latency_s=env.latency_s,
        batch=recipe.train.batch_size,
    )  # fmt: skip
    try:
        own = _with_planned(own, recipe, technique, side, setting)
    except (EdgetrainError, ValueError) as exc:
        return Candidate(family, technique, own, error=getattr(exc, "problem", str(exc)))
    return Candidate(family, technique, own, hosts, setting)


def _with_planned(own: Recipe, recipe: Recipe, technique: str, side: Any, setting: Any) -> Recipe:
    """``own`` with the choices the technique's cost model made on ``setting`` written in
    (the side's ``planned`` hook: a pipeline's cuts), so a launch of the recipe advise writes
    runs what it predicted."""
    hook = getattr(side, "planned", None)
    keys = hook(own, setting) if hook is not None else None
    if not keys:
        return own
    data = own.model_dump(mode="json", exclude_unset=True)
    for section, values in keys.items():
        data[section] = {**data.get(section, {}), **values}
    return _checked(data, recipe, technique, side)


def _own_recipe(
    recipe: Recipe, family: str, technique: str, slots: int, side: Any
) -> Recipe | None:
    """The user's recipe with only the technique changed, where its workers fill the slots
    and the technique accepts them; else None."""
    if recipe.train.family != family or recipe.num_workers != slots:
        return None
    groups = [(g.role or recipe.family_spec.default_role, g.count) for g in recipe.workers]
    roles = techniques.technique_spec(family, technique).roles
    if any(role not in roles for role, _ in groups):
        return None
    try:
        return _recipe_with(recipe, family, technique, None, side)
    except EdgetrainError:
        return None


def _recipe_with(
    recipe: Recipe,
    family: str,
    technique: str,
    groups: Sequence[tuple[str, int]] | None,
    side: Any,
) -> Recipe:
    """The recipe with the technique (and, given ``groups``, the workers) replaced, as the
    technique's check accepts it; where the user's sections for it do not fit (a per-worker
    list of another length, a key another technique of the section reads), the technique's
    sections at their defaults."""
    data = recipe.model_dump(mode="json", exclude_unset=True)  # what the user wrote
    data["train"] = {**data.get("train", {}), "family": family, "technique": technique}
    if not techniques.family_spec(family).deferred_eval:
        data["train"].pop("eval_deferred", None)  # the gossip family's alone
    if groups is not None:
        data["workers"] = [{"role": role, "count": n} for role, n in groups if n > 0]
        if data.get("data", {}).get("partition") == "fractions":
            data["data"] = {**data["data"], "partition": "iid", "fractions": None}
    try:
        return _checked(data, recipe, technique, side)
    except EdgetrainError:
        for section in techniques.technique_spec(family, technique).sections:
            data.pop(section, None)
        return _checked(data, recipe, technique, side)


def _checked(data: dict[str, Any], recipe: Recipe, technique: str, side: Any) -> Recipe:
    """``data`` parsed as the candidate and checked by its technique; the user's lr left out
    where the candidate steps with another optimiser than the user's technique (an SGD step
    size makes Adam diverge): the candidate then takes its optimiser's default lr. With the
    same optimiser, a candidate that raises its lr in the run (``lr_factor``: DLion's warm-up
    to k lr) gets the user's lr scaled so that the largest step it reaches is the largest the
    user's technique reaches (LeNet-5 at the user's 0.05 warmed up to 0.2 trained to chance)."""
    own = parse_recipe(data, f"the recipe as {technique}")
    if own.optimizer != recipe.optimizer and "lr" in data["train"]:
        data["train"] = {k: v for k, v in data["train"].items() if k != "lr"}
        own = parse_recipe(data, f"the recipe as {technique}")
    elif own.optimizer == recipe.optimizer:
        theirs, mine = _lr_factor(recipe, None), _lr_factor(own, side)
        if mine != theirs:
            data["train"] = {**data["train"], "lr": recipe.train.lr * theirs / mine}
            own = parse_recipe(data, f"the recipe as {technique}")
    side.check(own)
    return own


def _lr_factor(recipe: Recipe, side: Any) -> float:
    """The most a run of ``recipe`` multiplies its lr by (its technique's ``lr_factor`` hook;
    ``side`` None: the recipe's own technique's)."""
    from edgetrain.runtime.side import launcher_side

    side = side or launcher_side(recipe.train.family, recipe.train.technique)
    hook = getattr(side, "lr_factor", None)
    return float(hook(recipe)) if hook is not None else 1.0


def place_workers(recipe: Recipe, env: Environment) -> list[str]:
    """The host of each worker, as launch places them; fewer workers than slots take the
    fastest slots (PlacementError: labels no slot carries)."""
    from edgetrain.launch.placement import Need, place

    spec = recipe.family_spec
    needs = [
        Need(role, tuple(g.labels), spec.placement.get(role))
        for role, g in zip(recipe.role_names(), recipe.expanded_workers(), strict=True)
    ]
    slots = env.slot_hosts()
    cpu = {h.name: h.cpu for h in env.facts.hosts}
    if len(needs) < len(slots):
        fastest = sorted(range(len(slots)), key=lambda k: -cpu[slots[k]])[: len(needs)]
        slots = [slots[k] for k in sorted(fastest)]
    labels = [env.labels.get(host, ()) for host in slots]
    return [slots[k] for k in place(needs, labels)]


def recipe_text(cand: Candidate) -> str:
    """The candidate's recipe as TOML: what the user wrote, with the technique and workers
    advise chose."""
    from edgetrain.tomlconfig import recipe_toml

    assert cand.recipe is not None
    return recipe_toml(cand.recipe.model_dump(mode="json", exclude_unset=True))


def hosts_for(hosts_text: str, placed: Sequence[str]) -> str:
    """A hosts file's text with only the hosts ``placed`` names, each with as many worker
    slots as workers placed on it (launch fills every slot), the rest of the file kept."""
    from edgetrain.tomlconfig import dumps, loads

    doc = loads(hosts_text)
    count = {h: list(placed).count(h) for h in placed}
    doc["hosts"] = [
        {**h, "workers": count[h.get("name") or h["address"]]}
        for h in doc.get("hosts") or []
        if (h.get("name") or h["address"]) in count
    ]
    return dumps(doc)
