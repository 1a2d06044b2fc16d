"""One answer: every chosen technique's candidate run on an environment, its cost model's
prediction, the ranking and the document ``RUN/advice.json`` holds. Pure given its inputs (the
recipe, the environment, the profiled layers): no files, no processes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from edgetrain import techniques
from edgetrain.advise.candidates import Candidate, candidate
from edgetrain.advise.environment import Environment
from edgetrain.advise.rank import Entry, Memory, Ranked, near_best, rank
from edgetrain.errors import EdgetrainError
from edgetrain.recipe import Recipe
from edgetrain.runtime.predict import Layer, Prediction

__all__ = [
    "SCHEMA",
    "advice",
    "by_link_class",
    "entries",
    "replica_bytes",
    "samples_per_iteration",
]

SCHEMA = 1


def samples_per_iteration(recipe: Recipe) -> int:
    """The samples one predicted iteration trains: every data worker's batch (gossip, the
    parameter servers), or one microbatch where no role trains on a shard (a pipeline, whose
    data-parallel replicas split the microbatch)."""
    spec = recipe.family_spec
    workers = sum(1 for r in recipe.role_names() if r in spec.data_roles)
    return recipe.train.batch_size * max(1, workers)


def entries(
    recipe: Recipe, env: Environment, layers: Sequence[Layer], pairs: Sequence[tuple[str, str]]
) -> list[tuple[Entry, Candidate]]:
    """Each (family, technique) pair's entry, beside its candidate run."""
    from edgetrain.runtime.side import launcher_side

    out = []
    for family, technique in pairs:
        base = techniques.technique_spec(family, technique).baseline
        side = launcher_side(family, technique)
        cand = candidate(recipe, family, technique, env, layers, side)
        if cand.error is not None or cand.recipe is None or cand.setting is None:
            out.append((Entry(family, technique, None, baseline=base, error=cand.error), cand))
            continue
        try:
            pred = side.predict(cand.recipe, cand.setting)
        except (ValueError, KeyError, ZeroDivisionError, EdgetrainError) as exc:
            why = exc.problem if isinstance(exc, EdgetrainError) else str(exc)
            out.append((Entry(family, technique, None, baseline=base, error=why), cand))
            continue
        if pred is None:
            entry = Entry(family, technique, None, baseline=base, error="no cost model yet")
        else:
            links = side.traffic(cand.recipe)
            if links is None:
                n = len(cand.hosts)
                links = [(a, b) for a in range(n) for b in range(a + 1, n)]
            sites = {h.name: h.site for h in env.facts.hosts}
            entry = Entry(
                family,
                technique,
                pred,
                samples_per_iteration(cand.recipe),
                _memory(pred, cand),
                base,
                bytes_by_class=by_link_class(pred.bytes_per_iteration, links, cand.hosts, sites),
            )
        out.append((entry, cand))
    return out


def by_link_class(
    nbytes: int,
    pairs: Sequence[tuple[int, int]],
    hosts: Sequence[str],
    sites: Mapping[str, str | None],
) -> dict[str, int]:
    """``nbytes`` split evenly over the worker ``pairs`` that carry the traffic, summed by
    link class (pure): ``loopback`` (one host), ``lan`` (one site, or no sites named), ``wan``
    (two sites)."""
    out = {"loopback": 0.0, "lan": 0.0, "wan": 0.0}
    pairs = [(a, b) for a, b in pairs if 0 <= a < len(hosts) and 0 <= b < len(hosts)]
    share = nbytes / len(pairs) if pairs and nbytes > 0 else 0.0
    for a, b in pairs:
        ha, hb = hosts[a], hosts[b]
        cls = "loopback" if ha == hb else "wan" if sites.get(ha) != sites.get(hb) else "lan"
        out[cls] += share
    return {k: int(round(v)) for k, v in out.items()}


def replica_bytes(layers: Sequence[Layer], batch: int, optimizer_copies: int) -> int:
    """A whole-model worker's resident training bytes (pure): the weights, their gradients and
    ``optimizer_copies`` more (momentum 1, Adam 2), and one batch's activations twice (kept for
    the backward pass, and their gradients); ``layers`` are profiled at ``batch`` samples."""
    params = sum(x.param_bytes for x in layers)
    return params * (2 + optimizer_copies) + 2 * sum(x.activation_bytes for x in layers)


def _copies(recipe: Recipe) -> int:
    if recipe.optimizer == "adam":  # Mercury's own [mercury] optimizer too
        return 2
    return 1 if recipe.train.momentum > 0 else 0


def _memory(pred: Prediction, cand: Candidate) -> tuple[Memory, ...]:
    """Each worker's predicted bytes beside its device's memory: the technique's own model's
    where it predicts memory, else every data worker a whole replica (:func:`replica_bytes`)."""
    assert cand.setting is not None and cand.recipe is not None
    devices = cand.setting.devices
    need = dict(pred.memory_bytes)
    if not need:
        data_roles = cand.recipe.family_spec.data_roles
        setting = cand.setting.at_batch(cand.recipe.train.batch_size)
        each = replica_bytes(setting.layers, cand.recipe.train.batch_size, _copies(cand.recipe))
        need = {w: each for w, role in enumerate(cand.roles) if role in data_roles}
    return tuple(
        Memory(w, devices[w].name, int(b), devices[w].memory_bytes)
        for w, b in sorted(need.items())
        if 0 <= w < len(devices)
    )


def advice(
    recipe: Recipe,
    env: Environment,
    layers: Sequence[Layer],
    pairs: Sequence[tuple[str, str]],
    train_samples: int | None,
    what_if: Sequence[str] = (),
    recipes: dict[str, Candidate] | None = None,
) -> dict[str, Any]:
    """The document: the environment, every ranked technique with its parts and reasons, and
    those that cannot be predicted here with why; ``recipes``, given, receives each ranked
    technique's candidate run (its recipe and placement, for files a user can launch)."""
    found = entries(recipe, env, layers, pairs)
    cands = {e.technique: c for e, c in found}
    ranked, missing = rank([e for e, _ in found], train_samples)
    if recipes is not None:
        recipes.update({r.entry.technique: cands[r.entry.technique] for r in ranked})
    return {
        "schema": SCHEMA,
        "model": recipe.model.name,
        "batch_size": recipe.train.batch_size,
        "train_samples": train_samples,
        "environment": env.as_dict(),
        "what_if": list(what_if),
        "best": ranked[0].entry.technique if ranked else None,
        "near_best": [e.technique for e in near_best([r.entry for r in ranked])],
        "ranking": [_row(r, cands[r.entry.technique]) for r in ranked],
        "not_predicted": [
            {"family": e.family, "technique": e.technique, "why": e.error or "no prediction"}
            for e in missing
        ],
        "caveat": "speed only: the time to a target accuracy also depends on the epochs each "
        "technique needs, which these cost models do not predict",
    }


def _row(r: Ranked, cand: Candidate) -> dict[str, Any]:
    e, p = r.entry, r.entry.prediction
    assert p is not None
    return {
        "place": r.place,
        "family": e.family,
        "technique": e.technique,
        "iteration_s": p.iteration_s,
        "samples_per_iteration": e.samples,
        "samples_per_s": e.rate,
        "epoch_s": r.epoch_s,
        "parts": {k: float(v) for k, v in p.parts.items()},
        "bytes_per_iteration": p.bytes_per_iteration,
        "bytes_per_link_class": dict(e.bytes_by_class),
        "fits": e.fits,
        "memory": [
            {"worker": m.worker, "device": m.device, "need_bytes": m.need, "have_bytes": m.have}
            for m in e.memory
        ],
        "memory_source": "the cost model" if p.memory_bytes else "a whole replica per worker",
        "workers": [
            {"role": role, "host": host} for role, host in zip(cand.roles, cand.hosts, strict=True)
        ],
        "baseline": e.baseline,
        "lr": cand.recipe.train.lr if cand.recipe is not None else None,
        "reasons": list(r.reasons),
        "notes": list(p.notes),
    }
