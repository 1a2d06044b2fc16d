"""The stage executor and its stores in one process (specification §8): mcPipe equals PipeDream
per microbatch (T3), a window of one equals Local (T4), the executor is textbook SGD (T5),
PipeDream matches an independent delayed-SGD reference (T7), GreedyUpdates' versions (T8),
nothing keeps mcPipe's materialised weights (T9), the shared weight-gradient function (T10),
the linearity probe (T11) and the memory accountant against the closed forms (T12)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch
from torch import nn

from edgetrain.pipeline import schedule, simulate
from edgetrain.pipeline.bounds import UnitSize, resident
from edgetrain.pipeline.chain import build_units
from edgetrain.pipeline.kernels import generic_weight_grad, linear_in_params, weight_grad
from edgetrain.pipeline.stage_build import PipelineSetupError, choose_modes, linear_units
from edgetrain.pipeline.stores import Hyper
from edgetrain.pipeline.table import unit_table
from tests.helpers.vision import needs_torchvision


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


RNG = np.random.default_rng(0)
X = RNG.standard_normal((160, 1, 8, 8)).astype(np.float32)
Y = RNG.integers(0, 10, 160).astype(np.int64)
SHAPE = (1, 8, 8)


def mixed() -> nn.Module:
    """Conv, BatchNorm, pooling, dropout and linear layers: four units."""
    torch.manual_seed(1)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.2), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(32, 10),
    )  # fmt: skip


def mlp() -> nn.Module:
    torch.manual_seed(2)
    return nn.Sequential(
        nn.Flatten(), nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 32), nn.ReLU(),
        nn.Linear(32, 10),
    )  # fmt: skip


SPLITS = {
    2: [(0, 2), (2, 4)],
    3: [(0, 1), (1, 3), (3, 4)],
    4: [(0, 1), (1, 2), (2, 3), (3, 4)],
}
HYPER = Hyper(0.05, momentum=0.9, weight_decay=1e-4)


def _run(technique: str, bounds, make=mixed, **kw):
    kw.setdefault("hyper", HYPER)
    kw.setdefault("microbatch", 8)
    kw.setdefault("cap", 10)
    kw.setdefault("epochs", 2)
    return simulate.run(make, "test", SHAPE, X, Y, bounds, technique, **kw)


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


PLAIN = Hyper(0.05)  # plain SGD: Linear units step through the fused addmm


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("extra", [0, 1])
@pytest.mark.parametrize("hyper", [HYPER, PLAIN], ids=["momentum", "plain"])
def test_mcpipe_uses_pipedreams_weights_per_microbatch_bit_for_bit(
    n: int, extra: int, hyper: Hyper
) -> None:
    """T3 (and T16: momentum and weight decay replay exactly; under plain SGD the Linear
    units' fused steps replay exactly too)."""
    pd = _run("pipedream", SPLITS[n], extra=extra, trace=True, hyper=hyper)
    mc = _run("mcpipe", SPLITS[n], extra=extra, trace=True, hyper=hyper)
    assert pd.trace == mc.trace  # every (stage, epoch, F/B, microbatch, unit, version, digest)
    assert len(pd.trace) == 2 * 2 * 10 * 4
    assert _same(pd.weights, mc.weights)  # weights and BatchNorm statistics
    assert all(m == ["pairs"] * len(m) for m in mc.modes)
    greedy = _run("greedy", SPLITS[n], extra=extra, hyper=hyper)
    assert not _same(pd.weights, greedy.weights)


def test_the_interleaving_of_stages_does_not_change_the_weights() -> None:
    a = _run("mcpipe", SPLITS[3], interleave="turns")
    b = _run("mcpipe", SPLITS[3], interleave="random", seed=0)
    assert _same(a.weights, b.weights)


@pytest.mark.parametrize("technique", ["pipedream", "greedy", "mcpipe"])
@pytest.mark.parametrize("hyper", [HYPER, PLAIN], ids=["momentum", "plain"])
def test_a_window_of_one_equals_local_sgd(technique: str, hyper: Hyper) -> None:
    """T4: stop-and-wait at every stage is model parallelism without pipelining."""
    local = _run("local", [(0, 4)], hyper=hyper)
    for n in (2, 3, 4):
        got = _run(technique, SPLITS[n], uniform=1, hyper=hyper)
        assert _same(local.weights, got.weights), n


def test_the_executor_is_textbook_sgd() -> None:
    """T5: one stage, window one, against loss.backward() and p -= lr * p.grad."""
    got = _run("local", [(0, 3)], make=mlp, hyper=Hyper(0.05), epochs=1, cap=20)
    from edgetrain.pipeline import feed

    model = mlp()
    for idx in feed.epoch_order(len(X), 8, 0, 1, cap=20):
        model.zero_grad()
        loss = nn.functional.cross_entropy(
            model(torch.from_numpy(X[idx])), torch.from_numpy(Y[idx])
        )
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad
    for name, p in model.state_dict().items():
        np.testing.assert_allclose(got.weights[name], p.numpy(), rtol=1e-5, atol=1e-6)


def _delayed_sgd_reference(bounds, epochs: int, cap: int) -> dict[str, np.ndarray]:
    """T7: PipeDream from §5.2 alone, with plain autograd and a dict of versions per stage:
    forward at the newest version, backward at the same (stashed) version, the gradient
    applied to the newest. No executor, no store, no weight_grad."""
    from edgetrain.pipeline import feed

    model = mlp()
    layers = [m for m in model if isinstance(m, nn.Linear)]
    n = len(bounds)
    versions = [{0: [(lay.weight.detach().clone(), lay.bias.detach().clone())
                     for lay in layers[lo:hi]]} for lo, hi in bounds]  # fmt: skip
    newest = [0] * n
    for epoch in range(1, epochs + 1):
        batches = feed.epoch_order(len(X), 8, 0, epoch, cap)
        m = len(batches)
        orders = [schedule.order(s, n, m) for s in range(n)]
        pos, acts, grads, saved = [0] * n, [{} for _ in range(n)], [{} for _ in range(n)], {}
        while any(p < len(o) for p, o in zip(pos, orders, strict=True)):
            for s in range(n):
                if pos[s] == len(orders[s]):
                    continue
                op = orders[s][pos[s]]
                if op.kind == "F":
                    if s == 0:
                        idx = batches[op.mb]
                        h, y = torch.from_numpy(X[idx]).flatten(1), torch.from_numpy(Y[idx])
                    elif op.mb in acts[s]:
                        h, y = acts[s].pop(op.mb)
                    else:
                        continue
                    v = newest[s]
                    ws = [(w.clone().requires_grad_(), b.clone().requires_grad_())
                          for w, b in versions[s][v]]  # fmt: skip
                    x = h.detach().requires_grad_(s > 0)
                    out = x
                    for k, (w, b) in enumerate(ws):
                        if s > 0 or k > 0:
                            out = torch.relu(out)
                        out = nn.functional.linear(out, w, b)
                    saved[s, op.mb] = (x, out, ws, v, y)
                    if s < n - 1:
                        acts[s + 1][op.mb] = (out.detach(), y)
                else:
                    if s < n - 1 and op.mb not in grads[s]:
                        continue
                    x, out, ws, v, y = saved.pop((s, op.mb))
                    params = [t for pair in ws for t in pair]
                    if s == n - 1:
                        got = torch.autograd.grad(
                            nn.functional.cross_entropy(out, y), [*params, x] if s else params
                        )
                    else:
                        got = torch.autograd.grad(
                            out, [*params, x] if s else params, grads[s].pop(op.mb)
                        )
                    if s > 0:
                        grads[s - 1][op.mb] = got[-1]
                    pairs = zip(versions[s][newest[s]], got[0::2], got[1::2], strict=False)
                    new = [(w - 0.05 * gw, b - 0.05 * gb) for (w, b), gw, gb in pairs]
                    newest[s] += 1
                    versions[s][newest[s]] = [(w.detach(), b.detach()) for w, b in new]
                pos[s] += 1
    out = {}
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    flat = [pair for s in range(n) for pair in versions[s][newest[s]]]
    for name, (w, b) in zip(names, flat, strict=True):
        out[f"{name}.weight"], out[f"{name}.bias"] = w.numpy(), b.numpy()
    return out


def test_pipedream_matches_an_independent_delayed_sgd_reference() -> None:
    bounds = [(0, 1), (1, 2), (2, 3)]
    got = _run("pipedream", bounds, make=mlp, hyper=Hyper(0.05), epochs=2, cap=12)
    want = _delayed_sgd_reference(bounds, 2, 12)
    for name, w in want.items():
        np.testing.assert_allclose(got.weights[name], w, rtol=1e-5, atol=1e-6)


def test_greedy_backwards_use_the_newest_weights() -> None:
    """T8: at stage 0 of 3, B_j runs at version j, PipeDream's at max(0, j - 2)."""
    g = _run("greedy", SPLITS[3], epochs=1, trace=True)
    p = _run("pipedream", SPLITS[3], epochs=1, trace=True)
    for run, want in ((g, lambda j: j), (p, lambda j: max(0, j - 2))):
        got = {(j, v) for s, _, op, j, u, v, _ in run.trace if s == 0 and op == "B" and u == 0}
        assert got == {(j, want(j)) for j in range(10)}


def test_nothing_keeps_mcpipes_materialised_weights() -> None:
    """T9: every weight materialised for a forward is gone once the forward returned (a
    store without ``keep_rebuilt``, as in memory runs)."""
    from edgetrain.pipeline.stage_build import cut, make_stage

    units = cut(mlp(), "test", (0, 3))
    infos = unit_table(units, SHAPE)
    stage = make_stage(units, infos, "mcpipe", Hyper(0.05), last=True, seed=0, input_shape=SHAPE)
    made: list[weakref.ref] = []
    original = stage.store._materialise

    def spy(u: int, v: int, **kw: bool):
        w = original(u, v, **kw)
        made.extend(weakref.ref(t) for t in w.values())
        return w

    stage.store._materialise = spy  # type: ignore[method-assign]
    x, y = torch.from_numpy(X[:8]), torch.from_numpy(Y[:8])
    stage.executor.forward(1, 0, x, y)
    stage.executor.step(None)
    stage.executor.forward(1, 1, x, y)  # version 1 = base + 1 pending? (last stage: folded)
    stage.store.in_flight.clear()
    # force a pending update: a second stage-0-like store with a window
    units0 = cut(mlp(), "test", (0, 2))
    s0 = make_stage(units0, infos[:2], "mcpipe", Hyper(0.05), last=False, seed=0, input_shape=SHAPE)
    made.clear()
    original0 = s0.store._materialise

    def spy0(u: int, v: int, **kw: bool):
        w = original0(u, v, **kw)
        made.extend(weakref.ref(t) for t in w.values())
        return w

    s0.store._materialise = spy0  # type: ignore[method-assign]
    for j in range(3):
        s0.executor.forward(1, j, x)
    s0.executor.step(torch.ones(8, 32))  # one pending pair: the next forward materialises
    s0.executor.forward(1, 3, x)
    gc.collect()
    assert made and all(r() is None for r in made)
    s0.executor.sample()
    assert s0.store.resident_bytes() > 0


def test_the_shared_weight_gradient_matches_autograd() -> None:
    """T10: the explicit formulas against the generic fallback; BN statistics untouched."""
    torch.manual_seed(0)
    cases = [
        (nn.Linear(6, 4), torch.randn(5, 6)),
        (nn.Linear(6, 4, bias=False), torch.randn(2, 3, 6)),
        (nn.Conv1d(4, 6, 3, stride=2, dilation=2, groups=2), torch.randn(3, 4, 17)),
        (nn.Conv2d(2, 4, 3, padding=1, bias=False), torch.randn(3, 2, 7, 7)),
        (nn.Conv2d(4, 4, 3, stride=2, groups=4), torch.randn(2, 4, 9, 9)),
        (nn.BatchNorm1d(5), torch.randn(6, 5)),
        (nn.BatchNorm2d(3), torch.randn(4, 3, 5, 5)),
        (nn.LayerNorm([4, 5]), torch.randn(3, 4, 5)),
    ]
    for module, x in cases:
        module.train()
        buffers = {k: v.clone() for k, v in module.named_buffers()}
        with torch.no_grad():
            y = module(x)
        for k, v in buffers.items():  # reset what the forward moved
            getattr(module, k.split(".")[-1]).copy_(v)
        delta = torch.randn_like(y)
        own = dict(module.named_parameters())
        explicit = weight_grad(module, x, delta, own)
        generic = generic_weight_grad(module, x, delta, own)
        assert set(explicit) == set(own), module
        for name in own:
            torch.testing.assert_close(explicit[name], generic[name], rtol=1e-5, atol=1e-5)
        for k, v in module.named_buffers():
            assert torch.equal(v, buffers[k]), (module, k)


class Squared(nn.Module):
    """y = x (W W): not linear in W."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ (self.w @ self.w)


def test_the_linearity_probe_and_the_store_that_cannot_keep_pairs() -> None:
    """T11: Linear, Conv and BN pass; LSTM, a weight-normalised Linear and W W fail; mcPipe
    keeps a failing unit as versions, or refuses it in one line with store = "pairs"."""
    torch.manual_seed(0)
    assert linear_in_params(nn.Linear(4, 3), torch.randn(2, 4))
    assert linear_in_params(nn.Conv2d(2, 3, 3), torch.randn(2, 2, 5, 5))
    assert linear_in_params(nn.BatchNorm2d(3), torch.randn(4, 3, 5, 5))
    assert not linear_in_params(nn.LSTM(4, 3, batch_first=True), torch.randn(2, 5, 4))
    norm = nn.utils.parametrizations.weight_norm(nn.Linear(4, 3))
    assert not linear_in_params(norm, torch.randn(2, 4))
    assert not linear_in_params(Squared(), torch.randn(2, 4))

    torch.manual_seed(3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 4), Squared(), nn.Linear(4, 10))
    units = build_units(model, "test")
    infos = unit_table(units, SHAPE)
    linear = linear_units(units, SHAPE)
    assert linear == [True, False, True]
    assert choose_modes("mcpipe", infos, linear).modes == ["pairs", "versions", "pairs"]
    assert choose_modes("pipedream", infos, linear).modes == ["versions"] * 3
    with pytest.raises(PipelineSetupError) as err:
        choose_modes("mcpipe", infos, linear, store="pairs")
    assert "\n" not in str(err.value) and "not linear in its own parameters" in str(err.value)
    assert "store = 'mixed'" in str(err.value)

    # a mixed mcPipe stage still equals PipeDream bit for bit
    def make() -> nn.Module:
        torch.manual_seed(3)
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 4), Squared(), nn.Linear(4, 10))

    kw = {"make": make, "hyper": Hyper(0.01), "epochs": 1}
    a = _run("pipedream", [(0, 1), (1, 2), (2, 3)], **kw)
    b = _run("mcpipe", [(0, 1), (1, 2), (2, 3)], **kw)
    assert b.modes == [["pairs"], ["versions"], ["pairs"]] and _same(a.weights, b.weights)


@pytest.mark.parametrize("extra", [0, 1])
def test_the_accountant_measures_the_closed_forms_to_the_byte(extra: int) -> None:
    """T12: resident bytes per stage, N = 3, b = 16, against §7.3 (no momentum)."""

    def wide() -> nn.Module:
        torch.manual_seed(4)
        return nn.Sequential(
            nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
            nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10),
        )  # fmt: skip

    bounds = [(0, 2), (2, 3), (3, 4)]
    units = build_units(wide(), "test")
    infos = unit_table(units, SHAPE)
    for technique, store in (("pipedream", "versions"), ("mcpipe", "pairs"), ("greedy", "latest")):
        got = simulate.run(
            wide, "test", SHAPE, X, Y, bounds, technique, microbatch=16, hyper=Hyper(0.01),
            extra=extra, cap=9,
        )  # fmt: skip
        for s, (lo, hi) in enumerate(bounds):
            m = schedule.in_flight(s, 3, extra)
            sizes = [UnitSize(u.params, u.pair_elems) for u in infos[lo:hi]]
            assert got.memory[s]["resident_bytes"] == resident(store, m, sizes, 16), (technique, s)
    # the headline of the specification's MLP table in miniature: stage 0 saves with pairs
    pd = resident("versions", 3 + extra, [UnitSize(u.params, u.pair_elems) for u in infos[:2]], 16)
    mc = resident("pairs", 3 + extra, [UnitSize(u.params, u.pair_elems) for u in infos[:2]], 16)
    assert pd > mc


@needs_torchvision
def test_resnet_runs_at_block_granularity_and_mcpipe_still_equals_pipedream() -> None:
    """A residual block is one cut item, with one pair per inner layer call (specification
    §5.5): mcPipe replays every convolution and BatchNorm of a block exactly."""
    from torchvision.models.resnet import BasicBlock, ResNet

    def make() -> nn.Module:
        torch.manual_seed(3)
        return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)

    units = build_units(make(), "resnet")
    names = [u.name for u in units]
    assert names == ["conv1", "bn1", "layer1.0", "layer2.0", "layer3.0", "layer4.0", "fc"]
    block = units[3]  # a block that downsamples: conv1, bn1, conv2, bn2, downsample.0, .1
    assert [leaf.kind for leaf in block.leaves] == ["Conv2d", "BatchNorm2d"] * 3
    x = RNG.standard_normal((24, 3, 16, 16)).astype(np.float32)
    y = RNG.integers(0, 10, 24).astype(np.int64)
    bounds = [(0, 3), (3, 5), (5, 7)]
    kw = {"microbatch": 4, "cap": 6, "hyper": Hyper(0.05), "trace": True}
    pd = simulate.run(make, "resnet", (3, 16, 16), x, y, bounds, "pipedream", **kw)
    mc = simulate.run(make, "resnet", (3, 16, 16), x, y, bounds, "mcpipe", **kw)
    assert pd.trace == mc.trace and _same(pd.weights, mc.weights)
    assert mc.modes == [["pairs"] * 3, ["pairs"] * 2, ["pairs"] * 2]


def test_the_fused_linear_step_gives_the_same_bits_in_place_and_into_a_buffer() -> None:
    """Every store steps a Linear unit through fused_sgd (one addmm per call): PipeDream into a
    new version's buffer, GreedyUpdates and mcPipe's folds in place, mcPipe's replays on a
    clone. The forms agree bit for bit, and with the unfused gradient to rounding."""
    from edgetrain.pipeline.stores import LeafCall, fusable, fused_sgd, unit_grads

    unit = build_units(mlp(), "mlp")[1]
    assert fusable(unit, Hyper(0.05)) and not fusable(unit, Hyper(0.05, momentum=0.9))
    gen = torch.Generator().manual_seed(0)
    calls = [
        LeafCall(0, torch.randn(8, 48, generator=gen), torch.randn(8, 32, generator=gen))
        for _ in range(2)
    ]  # two calls of the layer (shared weights): stepped in turn
    src = {n: p.detach().clone() for n, p in unit.module.named_parameters()}
    into = fused_sgd(unit, calls, src, 0.05, {n: torch.empty_like(t) for n, t in src.items()})
    inplace = {n: t.clone() for n, t in src.items()}
    fused_sgd(unit, calls, inplace, 0.05)
    assert _same(
        {k: v.numpy() for k, v in into.items()}, {k: v.numpy() for k, v in inplace.items()}
    )
    grads = unit_grads(unit, calls, src)
    for n, t in src.items():
        torch.testing.assert_close(into[n], t - 0.05 * grads[n], rtol=1e-5, atol=1e-6)
    untouched = fused_sgd(unit, [LeafCall(0, calls[0].x)], src, 0.05, {n: torch.empty_like(t)
                          for n, t in src.items()})  # fmt: skip
    assert all(torch.equal(untouched[n], src[n]) for n in src)  # no error reached it
