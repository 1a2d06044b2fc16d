"""Mercury's launcher side (``mercury`` and its baseline ``multips-sgd``): what a run needs,
its controller, its model and its report, as the :data:`SIDE` both registry entries name.

Every process is a ``trainer`` (a device) and serves one shard, so every one is needed: losing
a device stops the run naming it, unless ``[run] restart`` brings it back and every device
rewinds to the last checkpoint (:mod:`.device`). The controller (pure) gives each device at
start the iterations per epoch, every device's local dataset size (the shard owners'
weights) and the iterations per resharding round; at start and at every barrier it compares
the devices' weight hashes (a device that diverged halts the run with one line) and, with
``[mercury] stop_accuracy``, ends training once device 0's test accuracy reaches it. The
run's model is device 0's replica; the hand-ins' hashes must all agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.comm.control import CoordinationPolicy, Decision, HandIn, NoDirectives, Role
from edgetrain.errors import RecipeError
from edgetrain.ps.mercury.config import MercurySection, Settings, conflicts, settings
from edgetrain.ps.mercury.shards import diverged, naming
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import FinalModel, HandInError, TechniqueSide, WireLoad
from edgetrain.runtime.context import RunRecord
from edgetrain.runtime.predict import Prediction, Setting
from edgetrain.runtime.weights import OPTIM_PREFIX

PRIVATE = "mercury."  # hand-in arrays that are not the model (local data, cache)


def run_settings(recipe: Recipe) -> Settings:
    return settings(MercurySection.of(recipe), recipe.train.technique, recipe.train.batch_size)


def check(recipe: Recipe) -> None:
    """Refuse what cannot run: a role other than trainer, a [train] optimizer Mercury ignores."""
    problem = conflicts(MercurySection.of(recipe), recipe.train.technique)
    if problem is not None:
        raise problem
    run_settings(recipe)
    others = sorted({r for r in recipe.role_names() if r != "trainer"})
    if others:
        raise RecipeError(
            f"a {recipe.train.technique} run has devices only (role 'trainer'; each serves one "
            f"shard), not {', '.join(others)}",
            "drop the role of those [[workers]]",
        )
    if "optimizer" in recipe.train.model_fields_set:
        raise RecipeError(
            f"[train] optimizer is not read by {recipe.train.technique}",
            "set [mercury] optimizer = 'adam' (the default) or 'sgd' instead",
        )


def policy(recipe: Recipe) -> CoordinationPolicy:
    return CoordinationPolicy(
        epoch_roles=frozenset({"trainer"}),
        barriers=True,
        fatal_roles=frozenset({"trainer"}),
        checkpoint_roles=frozenset({"trainer"}),
        rewinds=True,  # under [run] restart a lost device comes back and every device rewinds
    )


def _hash_halt(when: str, hashes: Mapping[int, Any]) -> str | None:
    got = {d: str(h) for d, h in hashes.items() if isinstance(h, str)}
    bad = diverged(got)
    if not bad:
        return None
    return f"replicas diverged {when}: {naming(bad)} other weights than device {min(got)}"


class MercuryController(NoDirectives):
    """Iterations, sizes and rounds at start; the hash check and the stop at each barrier."""

    def __init__(self, recipe: Recipe, roles: Sequence[Role]) -> None:
        self.cfg = run_settings(recipe)
        self.batch = recipe.train.batch_size
        self.device = {i: r.index for i, r in enumerate(roles) if r.name == "trainer"}

    def _by_device(self, reports: Mapping[int, Mapping[str, Any]], key: str) -> dict[int, Any]:
        return {self.device[i]: r.get(key) for i, r in reports.items() if i in self.device}

    def on_start(self, ready: Mapping[int, Mapping[str, Any]]) -> Decision:
        sizes = self._by_device(ready, "samples")
        halt = _hash_halt("before training", self._by_device(ready, "weights_hash"))
        if halt:
            return Decision(halt=halt)
        counts = [int(sizes.get(d) or 0) for d in range(len(sizes))]
        local_epoch = max(1, min(counts) // self.batch) if counts else 1
        directive = {
            "iterations": self.cfg.epoch_iterations or local_epoch,
            "round_iterations": self.cfg.reshard_every or local_epoch,
            "sizes": counts,
        }
        return Decision({i: directive for i in ready})

    def on_barrier(self, epoch: int, reports: Mapping[int, Mapping[str, Any]]) -> Decision:
        halt = _hash_halt(f"by epoch {epoch}", self._by_device(reports, "weights_hash"))
        if halt:
            return Decision(halt=halt)
        acc = self._by_device(reports, "test_accuracy").get(0)
        stop = self.cfg.stop_accuracy
        if stop is not None and isinstance(acc, (int, float)) and acc >= stop:
            return Decision({i: {"stop": True} for i in reports})
        return Decision()


def final_model(handins: Mapping[int, HandIn], roles: Sequence[Role]) -> FinalModel:
    """Device 0's replica; every device's final hash must equal it."""
    devices = {roles[i].index: i for i in handins if roles[i].name == "trainer"}
    if not devices:
        raise HandInError("no Mercury device handed in its replica")
    hashes = {d: str(handins[i].meta.get("weights_hash")) for d, i in devices.items()}
    bad = diverged(hashes)
    if bad:
        raise HandInError(
            f"replicas diverged by the end: {naming(bad)} other weights than device 0"
        )
    first = handins[devices[min(devices)]]
    weights: dict[str, np.ndarray] = {
        k: v
        for k, v in first.weights.items()
        if not k.startswith(OPTIM_PREFIX) and not k.startswith(PRIVATE)
    }
    info = {"replicas": len(devices), "replica_hash": hashes[min(hashes)], "hashes_agree": True}
    return FinalModel(weights, info)


def resume(handins: Mapping[int, HandIn], roles: Sequence[Role]) -> dict[int, HandIn]:
    for i in handins:
        if roles[i].name != "trainer":
            raise HandInError(f"the checkpoint holds worker {i}, which is not a device now")
    return dict(handins)


def _controller(recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> MercuryController:
    return MercuryController(recipe, roles)


def _final_model(
    recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
) -> FinalModel:
    return final_model(handins, roles)


def _resume(
    recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
) -> dict[int, HandIn]:
    return resume(handins, roles)


def _report(run: RunRecord) -> dict[str, Any] | None:
    from edgetrain.ps.mercury.mercury_report import mercury_report

    return mercury_report(run.manifest, run.workers)


def _predict(recipe: Recipe, setting: Setting) -> Prediction | None:
    """The iteration-time model (:mod:`.predict`; its speed-up over uniform sampling is Eq. 5,
    :mod:`.speedup`). The local dataset size is not read here (the refresh is taken as one
    chunk); callers that know it use :func:`~.predict.predict_mercury` directly."""
    from edgetrain.ps.mercury.predict import Shape, predict_mercury

    devices = [i for i, r in enumerate(recipe.role_names()) if r == "trainer"]
    shape = Shape(devices=devices, batch=recipe.train.batch_size)
    return predict_mercury(run_settings(recipe), setting, shape)


def _wire_load(recipe: Recipe, data_bytes: int) -> WireLoad:
    """Hand-ins carry each device's training samples (its checkpoint keeps them, resharding
    swaps them), so a message can hold the whole training split."""
    return WireLoad(recipe.train.batch_size, data_bytes)


def _layout(recipe: Recipe, slots: int) -> list[tuple[str, int]]:
    """Every device a trainer and a shard."""
    if slots < 2:
        raise ValueError("Mercury's layout needs at least 2 devices")
    return [("trainer", slots)]


SIDE = TechniqueSide(
    layout=_layout,
    check=check,
    reads=lambda recipe: {},  # its own controller: no [ps] plan is read
    check_run_dir=lambda recipe, run_dir: None,  # (nor checked)
    wire_load=_wire_load,
    policy=policy,
    controller=_controller,
    final_model=_final_model,
    resume=_resume,
    report=_report,
    predict=_predict,
)
