"""The mcPipe reproduction's correctness checks in one process (specification §8, T3 and T14),
its phase 1.

- :func:`per_microbatch`: PipeDream and mcPipe in the in-process simulator, every operation
  logging a digest of the weights it used per unit: equal logs mean mcPipe's weights on demand
  equal PipeDream's stashed ones for every microbatch, unit and operation.
- :func:`simulated_sha`: a launched run's recipe replayed in the simulator; its final
  ``model_sha256`` must equal the run's, whatever processes, hosts and links it ran on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgetrain.experiment.kept import kept
from edgetrain.pipeline import simulate
from edgetrain.pipeline.partition import bounds_of
from edgetrain.pipeline.stores import Hyper
from reproductions.mcpipe_runs import Ctx


def _one_thread() -> Any:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as every stage process does (bitwise equality needs it)
    return before


def per_microbatch(
    model: str,
    options: Mapping[str, Any],
    dataset: str,
    split: Sequence[int],
    extra: int,
    microbatch: int = 16,
    microbatches: int = 12,
    seed: int = 0,
    lr: float = 0.05,
) -> dict[str, Any]:
    """PipeDream against mcPipe per microbatch: operations compared, and whether all agree."""
    import torch

    from edgetrain.data import load_dataset
    from edgetrain.models import build_model
    from edgetrain.recipe import DataSection

    before = _one_thread()
    try:
        ds = load_dataset(DataSection(dataset=dataset), seed)

        def make() -> torch.nn.Module:
            torch.manual_seed(seed)
            return build_model(model, ds.input_shape, ds.classes, dict(options))

        runs = {
            tech: simulate.run(
                make,
                model,
                ds.input_shape,
                ds.x_train,
                ds.y_train,
                list(bounds_of(list(split))),
                tech,
                microbatch=microbatch,
                hyper=Hyper(lr),
                seed=seed,
                extra=extra,
                cap=microbatches,
                trace=True,
            )  # fmt: skip
            for tech in ("pipedream", "mcpipe")
        }
    finally:
        torch.set_num_threads(before)
    pd, mc = runs["pipedream"], runs["mcpipe"]
    same_weights = set(pd.weights) == set(mc.weights) and all(
        np.array_equal(pd.weights[k], mc.weights[k]) for k in pd.weights
    )
    agree = sum(a == b for a, b in zip(pd.trace, mc.trace, strict=False))
    return {
        "model": model,
        "dataset": dataset,
        "split": list(split),
        "stages": len(split),
        "extra": extra,
        "microbatches": microbatches,
        "operations": len(pd.trace),
        "agree": agree,
        "equal": pd.trace == mc.trace and same_weights,
    }


def simulated_sha(recipe_text: str, seed: int, split: Sequence[int]) -> str:
    """The ``model_sha256`` the simulator trains from a (one-epoch) pipeline recipe, with the
    recipe's kernels: its chunks (``chunk_mib``), replay and rebuild buffer."""
    import torch

    from edgetrain.pipeline.config import PipelineSection
    from edgetrain.pipeline.proc import hyper_of
    from edgetrain.recipe import parse_recipe
    from edgetrain.runtime.setup import build_run_model, load_run_data
    from edgetrain.runtime.weights import model_sha256
    from edgetrain.tomlconfig import loads

    recipe = parse_recipe(loads(recipe_text.format(seed=seed)))
    cfg = recipe.section("pipeline", PipelineSection)
    before = _one_thread()
    try:
        data = load_run_data(recipe)
        result = simulate.run(
            lambda: build_run_model(recipe, data), recipe.model.name, data.input_shape,
            data.x_train, data.y_train, list(bounds_of(list(split))), recipe.train.technique,
            epochs=recipe.train.epochs, microbatch=cfg.microbatch or recipe.train.batch_size,
            hyper=hyper_of(recipe), seed=recipe.run.seed, extra=cfg.window_extra,
            uniform=cfg.window, cap=cfg.microbatches, store=cfg.store,
            chunk_mib=cfg.chunk_mib, replay=cfg.replay, keep_rebuilt=cfg.mmap_threshold is None,
        )  # fmt: skip
    finally:
        torch.set_num_threads(before)
    return model_sha256(result.weights)


def phase_sim(ctx: Ctx) -> list[dict[str, Any]]:
    """Phase 1: :func:`per_microbatch` for every configuration of the plan (kept)."""
    return list(kept(ctx.out / "correctness.json", lambda: _per_config(ctx)))


def _per_config(ctx: Ctx) -> list[dict[str, Any]]:
    ctx.say("mcPipe against PipeDream per microbatch, in one process")
    return [
        per_microbatch(model, options, "digits", split, e) for model, options, split, e in ctx.p.sim
    ]
