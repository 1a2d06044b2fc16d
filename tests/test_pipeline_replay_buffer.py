"""mcPipe's kept rebuild buffer (``keep_rebuilt``, on in runs without ``mmap_threshold``): a
forward's newest weights are rebuilt into one buffer the store keeps between forwards, bit for
bit what new tensors give (mcPipe still equals PipeDream, with and without momentum, at every
window), the buffer is reused, and the memory figures are the same as without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetrain.models import build_model
from edgetrain.pipeline import simulate
from edgetrain.pipeline.stores import Hyper

RNG = np.random.default_rng(0)
X = RNG.standard_normal((240, 1, 8, 8)).astype(np.float32)
Y = RNG.integers(0, 10, 240).astype(np.int64)
BOUNDS = [(0, 1), (1, 2), (2, 4)]


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("mlp", (1, 8, 8), 10, {"hidden": [64, 64, 64]})


def _run(technique: str, keep: bool, momentum: float, extra: int) -> simulate.SimResult:
    return simulate.run(
        _mlp, "mlp", (1, 8, 8), X, Y, BOUNDS, technique, microbatch=8,
        hyper=Hyper(0.05, momentum=momentum), extra=extra, keep_rebuilt=keep,
    )  # fmt: skip


@pytest.mark.parametrize(("momentum", "extra"), [(0.0, 0), (0.0, 2), (0.9, 0), (0.9, 2)])
def test_kept_buffer_keeps_mcpipe_bitwise_pipedream(momentum: float, extra: int) -> None:
    pd = _run("pipedream", False, momentum, extra)
    fresh = _run("mcpipe", False, momentum, extra)
    kept = _run("mcpipe", True, momentum, extra)
    for k in pd.weights:
        assert np.array_equal(kept.weights[k], pd.weights[k]), k
        assert np.array_equal(fresh.weights[k], pd.weights[k]), k
    assert kept.losses == pd.losses
    # the accountant's figures do not change: the buffer is the rebuild's transient
    assert kept.memory == fresh.memory


def test_the_buffer_is_reused_between_forwards() -> None:
    from edgetrain.pipeline.chain import build_units
    from edgetrain.pipeline.stage_build import cut, make_stage
    from edgetrain.pipeline.table import unit_table

    model = _mlp()
    n = len(build_units(model, "mlp"))
    units = cut(model, "mlp", (0, n))
    infos = unit_table(units, (1, 8, 8))
    stage = make_stage(
        units, infos, "mcpipe", Hyper(0.05), last=True, seed=0, input_shape=(1, 8, 8),
        microbatch=8, keep_rebuilt=True,
    )  # fmt: skip
    store = stage.store
    x, y = torch.from_numpy(X[:8]), torch.from_numpy(Y[:8])
    # a window of 2 on one stage: forward, forward, then backward and forward alternately
    ex = stage.executor
    ex.forward(1, 0, x, y)
    ex.forward(1, 1, x, y)
    ex.step(None)  # one update pending while microbatch 1 (on the base) is in flight
    u = 0
    assert store.latest != store.base  # the newest is rebuilt
    first = store.forward_weights(u, store.latest)
    ptrs = {n: t.data_ptr() for n, t in first.items()}
    ex.forward(1, 2, x, y)
    ex.step(None)
    assert store.latest != store.base
    again = store.forward_weights(u, store.latest)
    assert {n: t.data_ptr() for n, t in again.items()} == ptrs
    assert not any(t.data_ptr() in ptrs.values() for t in store.tensors())  # not resident
    ex.close()
