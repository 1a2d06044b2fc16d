"""What keeps a pipeline step cheap changes no number: the errors captured at gradient edges
equal the ones hooks catch, the weights swapped into a layer equal ``functional_call``'s, the
store's cached resident bytes equal a fresh count after every operation, the accountant's and
the timers' blocks keep their figures, and the session polls the coordinator at most every
interval."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from edgetrain.pipeline import executor, simulate
from edgetrain.pipeline.accounting import Accountant, Timers, storage_bytes
from edgetrain.pipeline.chain import build_units
from edgetrain.pipeline.stage_build import make_stage
from edgetrain.pipeline.stores import Hyper
from edgetrain.pipeline.swap import call_with, param_slots
from edgetrain.pipeline.table import unit_table
from edgetrain.runtime import session as session_mod
from tests.helpers.vision import needs_torchvision

RNG = np.random.default_rng(5)
X = RNG.standard_normal((96, 1, 8, 8)).astype(np.float32)
Y = RNG.integers(0, 10, 96).astype(np.int64)
SHAPE = (1, 8, 8)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def mixed() -> nn.Module:
    torch.manual_seed(4)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.2), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10),
    )  # fmt: skip


def mlp() -> nn.Module:
    torch.manual_seed(6)
    return nn.Sequential(
        nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 24), nn.ReLU(), nn.Linear(24, 10)
    )


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("technique", ["local", "pipedream", "mcpipe", "greedy"])
def test_errors_at_gradient_edges_equal_the_ones_hooks_catch(
    technique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not executor._EDGES:
        pytest.skip("this torch cannot return errors at gradient edges: hooks are the only way")
    bounds = [(0, 4)] if technique == "local" else [(0, 1), (1, 2), (2, 4)]
    kw: dict[str, Any] = {"microbatch": 8, "cap": 8, "epochs": 2, "trace": True, "extra": 1}
    kw["hyper"] = Hyper(0.05, momentum=0.9, weight_decay=1e-4)
    edges = simulate.run(mixed, "test", SHAPE, X, Y, bounds, technique, **kw)
    monkeypatch.setattr(executor, "_EDGES", False)
    hooks = simulate.run(mixed, "test", SHAPE, X, Y, bounds, technique, **kw)
    assert edges.trace == hooks.trace  # every operation used the same weights
    assert _same(edges.weights, hooks.weights)
    assert edges.losses == hooks.losses and edges.memory == hooks.memory


def _free_unit(make: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    unit = build_units(make(), "test")[1]  # Linear(32, 24) after its ReLU
    weights = {n: p.detach().clone() for n, p in unit.module.named_parameters()}
    executor.free_module_params([unit])
    return unit, weights


def test_swapped_weights_give_functional_calls_numbers_and_go_back() -> None:
    unit, weights = _free_unit(mlp)
    slots = param_slots(unit)
    assert slots is not None and slots.keys == {"weight", "bias"}
    x = torch.randn(5, 32)
    got = call_with(unit.module, slots, weights, x)
    assert torch.equal(got, functional_call(unit.module, weights, (x,)))
    assert torch.equal(got, F.linear(x, weights["weight"], weights["bias"]))
    assert all(p.is_meta for p in unit.module.parameters())  # the store's tensors went back out
    with pytest.raises(RuntimeError):
        call_with(unit.module, slots, weights, torch.randn(5, 7))  # wrong width
    assert all(p.is_meta for p in unit.module.parameters())
    # weights that name other parameters than the slots go through functional_call
    partial = {"weight": weights["weight"], "bias": torch.zeros(24)}
    assert torch.equal(
        call_with(unit.module, None, partial, x), functional_call(unit.module, partial, (x,))
    )


def test_a_layer_with_a_cached_weight_list_is_not_swapped() -> None:
    lstm = nn.LSTM(4, 3)
    unit = types.SimpleNamespace(leaves=[types.SimpleNamespace(module=lstm)], module=lstm)
    assert param_slots(unit) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("technique", ["local", "pipedream", "mcpipe", "greedy"])
def test_the_cached_resident_bytes_equal_a_fresh_count_after_every_operation(
    technique: str,
) -> None:
    units = build_units(mlp(), "test")
    infos = unit_table(units, SHAPE)
    st = make_stage(
        units, infos, technique, Hyper(0.05, momentum=0.9), last=True, seed=0,
        input_shape=SHAPE, microbatch=8,
    )  # fmt: skip
    ex, store = st.executor, st.store
    xt, yt = torch.from_numpy(X), torch.from_numpy(Y)

    def check() -> None:
        ex.sample()
        assert store.resident_bytes() == storage_bytes(store.tensors())

    window = 1 if technique == "local" else 3
    j = 0
    for _ in range(window):  # fill: several versions (pipedream) or pending pairs (mcpipe)
        ex.forward(1, j, xt[j * 8 : (j + 1) * 8], yt[j * 8 : (j + 1) * 8])
        j += 1
        check()
    for _ in range(6):
        ex.step()
        check()
        ex.forward(1, j, xt[j * 8 : (j + 1) * 8], yt[j * 8 : (j + 1) * 8])
        j += 1
        check()
    while ex.flight:
        ex.step()
        check()
    assert store.idle()


def test_the_accountants_and_timers_blocks_keep_their_figures() -> None:
    acc = Accountant()
    acc.sample(1000, 10)
    with acc.hold(300), acc.hold(200):
        assert acc.temp == 500
    assert acc.temp == 0 and acc.transient_peak == 1500
    with pytest.raises(ValueError), acc.hold(50):
        raise ValueError
    assert acc.temp == 0
    timers = Timers()
    with pytest.raises(ValueError), timers.time("update_s"):
        raise ValueError  # the time spent still counts
    with timers.time("update_s"):
        pass
    assert timers.get("update_s") > 0 and set(timers.seconds) == {"update_s"}


def test_the_session_polls_the_coordinator_at_most_every_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = types.SimpleNamespace(on_message=None, polls=0)
    client.dispatch = lambda: setattr(client, "polls", client.polls + 1)
    ctx = types.SimpleNamespace(role=types.SimpleNamespace(name="stage"))
    s = session_mod.Session(client, ctx, types.SimpleNamespace(meta={}))  # type: ignore[arg-type]
    clock = iter([10.0, 10.0005, 10.0019, 10.0021, 10.003, 10.0042])
    monkeypatch.setattr(session_mod, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    seen = []
    for _ in range(6):
        s.poll()
        seen.append(client.polls)
    assert session_mod.POLL_INTERVAL_S == 0.002
    assert seen == [1, 1, 1, 2, 2, 3]


@needs_torchvision
def test_blocks_of_several_layers_capture_the_same_errors_both_ways(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A residual block is one unit of several layers: its layers keep registered hooks."""
    if not executor._EDGES:
        pytest.skip("this torch cannot return errors at gradient edges: hooks are the only way")
    from torchvision.models.resnet import BasicBlock, ResNet

    def make() -> nn.Module:
        torch.manual_seed(3)
        model: nn.Module = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)
        return model

    x = RNG.standard_normal((16, 3, 16, 16)).astype(np.float32)
    y = RNG.integers(0, 10, 16).astype(np.int64)
    bounds = [(0, 3), (3, 5), (5, 7)]
    kw: dict[str, Any] = {"microbatch": 4, "cap": 4, "hyper": Hyper(0.05), "trace": True}
    edges = simulate.run(make, "resnet", (3, 16, 16), x, y, bounds, "mcpipe", **kw)
    monkeypatch.setattr(executor, "_EDGES", False)
    hooks = simulate.run(make, "resnet", (3, 16, 16), x, y, bounds, "mcpipe", **kw)
    assert edges.trace == hooks.trace and _same(edges.weights, hooks.weights)
