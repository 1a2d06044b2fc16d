"""An EdgeGossip worker in this process (no coordinator): its setup (aggregates of its own
shard, the calibration that leaves the model as it was), each order's epoch, its metrics, and
directives it must not believe."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
import zmq

from edgetrain.comm.channel import Traffic
from edgetrain.comm.control import Role
from edgetrain.gossip.edgegossip.runner import EdgeGossip
from edgetrain.recipe import parse_recipe
from edgetrain.runtime.base import WorkerContext
from edgetrain.runtime.setup import build_run_model, load_run_data
from edgetrain.runtime.weights import float_state


def _worker(**eg: object) -> EdgeGossip:
    section = {"calibrate_s": 0.1, **eg}
    recipe = parse_recipe({
        "run": {"seed": 2},
        "data": {"dataset": "digits"},
        "model": {"name": "mlp"},
        "train": {"family": "gossip", "technique": "edgegossip", "batch_size": 16, "epochs": 3},
        "edgegossip": section,
        "workers": [{"count": 2}],
    })  # fmt: skip
    ctx = WorkerContext(recipe, "run1", 1, Role("trainer", 1), "hostx", zmq.Context.instance(),
                        Traffic())  # fmt: skip
    return EdgeGossip(ctx)


@pytest.fixture
def worker() -> Iterator[EdgeGossip]:
    w = _worker()
    try:
        yield w
    finally:
        w.close()


def _epoch(w: EdgeGossip, epoch: int) -> tuple[list[int], dict]:
    sizes = []
    for batch in w.batches(epoch):
        sizes.append(len(batch[1]))
        w.step(epoch, batch)  # no peers: GoSGD's exchange has no one to push to
    return sizes, w.metrics()


def test_setup_aggregates_calibrates_and_reports(worker: EdgeGossip) -> None:
    ready = worker.setup()
    recipe = worker.ctx.recipe
    fresh = float_state(build_run_model(recipe, load_run_data(recipe)))
    after = float_state(worker.trainer.model)
    assert all(torch.equal(fresh[k], after[k]) for k in fresh)  # calibration left no trace
    assert worker.trainer.steps == 0 and worker.trainer.times.compute_s == 0.0
    assert not worker.trainer.optimizer.state  # nor momentum
    meta = ready.meta
    n = worker.trainer.num_samples
    assert meta["samples"] == n == 718  # digits: 1,437 training samples over two workers
    assert 60 <= meta["points"] <= 80 and meta["aggregate_s"] > 0  # ratio 10, per class
    assert meta["host"] == "hostx" and meta["p_next"] > 0 and meta["t_cal"] > 0
    assert meta["rg_records"] == 0 and meta["monitor"] == "machine"
    # every sample is in exactly one subset of its own class
    assert sorted(worker.members.tolist()) == list(range(n))


def test_an_epoch_takes_its_share_and_reports_it(worker: EdgeGossip) -> None:
    worker.setup()
    worker.apply({"ratio": 0.5})
    sizes, m = _epoch(worker, 1)
    n = worker.trainer.num_samples
    assert 0.5 * n <= sum(sizes) < 0.5 * n + 16 + 20
    assert m["ratio"] == 0.5 and m["kept"] == sum(sizes) and m["batches"] == len(sizes)
    assert set(sizes[:-1]) == {16}  # the kept subsets shuffled into batches of b (default)
    assert m["p_obs"] > 0 and m["p_next"] > 0 and m["rank_s"] > 0
    assert m["predictor_error"] is not None and m["u_samples"] >= 0
    # a directive it must not believe keeps the last ratio, counted
    for bad in ({"ratio": -1}, {"ratio": float("nan")}, {"ratio": "1"}, {"ratio": 1e9}):
        worker.apply(bad)
    worker.apply({"tag": "no ratio here"})
    assert worker.ratio == 0.5 and worker.bad_directives == 4


@pytest.mark.parametrize(
    ("eg", "ratio", "exact"),
    [
        ({"order": "random"}, 0.25, True),
        ({"order": "oracle"}, 0.25, True),
        ({"order": "shuffled"}, 0.25, True),
        ({"order": "aggregated"}, 0.25, False),  # rank order: whole subsets, batches >= b
        ({"select": "global", "order": "aggregated"}, 0.25, False),
        ({"order": "aggregated", "exact_batches": True}, 0.25, True),
        ({"r_min": 0.4}, 0.0, True),
        ({}, 2.0, True),  # a redistributed share: a second pass
    ],
)
def test_every_order(eg: dict[str, object], ratio: float, exact: bool) -> None:
    w = _worker(**eg)
    try:
        w.setup()
        w.apply({"ratio": ratio})
        sizes, m = _epoch(w, 1)
        target = max(ratio, float(eg.get("r_min", 0.0))) * w.trainer.num_samples  # type: ignore[arg-type]
        assert target <= sum(sizes) < target + 16 + 20
        if exact:
            assert set(sizes[:-1]) == {16}
        else:
            assert min(sizes[:-1]) >= 16  # whole subsets until a batch holds at least b
        assert m["kept"] == sum(sizes)
        if eg.get("order") == "random":
            assert m["aggregate_s"] == 0.0 and len(w.offsets) == 1  # no aggregates built
    finally:
        w.close()


def test_per_class_selection_keeps_every_class(worker: EdgeGossip) -> None:
    worker.setup()
    worker.apply({"ratio": 0.2})
    kept = np.concatenate([yb.numpy() for _, yb in worker.batches(1)])
    assert len(np.unique(kept)) == 10  # the global ranking would keep a few classes


def test_rank_every_reuses_the_last_ranking_between_its_epochs() -> None:
    w = _worker(rank_every=3)
    try:
        w.setup()
        w.apply({"ratio": 0.5})
        ranked, orders = [], []
        for epoch in range(1, 8):
            _, m = _epoch(w, epoch)
            ranked.append(m["ranked"])
            assert w._order is not None
            orders.append(w._order.copy())
            assert m["t_obs"] > 0 and m["rank_s"] > 0  # the fill and shuffle, at least
        # epochs 1, 4 and 7 rank; the two between reuse the order (the model has changed)
        assert ranked == [True, False, False, True, False, False, True]
        assert np.array_equal(orders[0], orders[2]) and np.array_equal(orders[3], orders[5])
        assert not np.array_equal(orders[0], orders[3])
    finally:
        w.close()
    assert _worker().eg.rank_every == 3  # the default (ours; the paper's is 1)
    every = _worker(rank_every=1)
    try:
        every.setup()
        every.apply({"ratio": 0.5})  # at r = 1 nothing needs ranking
        assert [_epoch(every, e)[1]["ranked"] for e in (1, 2)] == [True, True]
    finally:
        every.close()


def test_rank_sample_ranks_points_in_proportion_to_the_share() -> None:
    w = _worker(rank_sample=2.0, rank_every=1)
    seen: list[int] = []
    try:
        w.setup()
        losses = w._losses
        w._losses = lambda x, y: (seen.append(len(y)), losses(x, y))[1]  # type: ignore[method-assign]
        total = len(w.point_labels)  # type: ignore[arg-type]
        for epoch, ratio in ((1, 0.1), (2, 0.25), (3, 0.6)):
            w.apply({"ratio": ratio})
            sizes, m = _epoch(w, epoch)
            assert m["ranked"] and ratio * w.trainer.num_samples <= sum(sizes)
            order = w._order
            assert order is not None and sorted(order.tolist()) == list(range(total))
        # ceil(2 r M) points ranked: 20%, 50%, then all of them
        assert seen == [int(np.ceil(2 * r * total)) for r in (0.1, 0.25)] + [total]
        # r = 1 keeps every subset whatever the order: no ranking; r = 1.5 ranks for its
        # last half pass, all of the points
        w.apply({"ratio": 1.0})
        sizes, m = _epoch(w, 4)
        assert not m["ranked"] and sum(sizes) == w.trainer.num_samples and len(seen) == 3
        w.apply({"ratio": 1.5})
        _, m = _epoch(w, 5)
        assert m["ranked"] and seen[-1] == total
    finally:
        w.close()
    held = _worker(rank_sample=2.0, rank_every=3)
    try:
        held.setup()
        ranked = []
        for epoch, ratio in ((1, 0.1), (2, 0.18), (3, 0.3), (4, 0.2)):
            held.apply({"ratio": ratio})
            ranked.append(_epoch(held, epoch)[1]["ranked"])
        # epoch 1 ranked 20% of the points: epoch 2 keeps 18%, among them; epoch 3 keeps
        # more than were ranked, a fresh ranking (of 60%), which epoch 4 reuses
        assert ranked == [True, False, True, False]
    finally:
        held.close()
    paper = _worker(rank_sample=0, rank_every=1)
    try:
        paper.setup()
        paper.apply({"ratio": 0.1})
        _epoch(paper, 1)
        assert paper.eg.rank_sample == 0 and _worker().eg.rank_sample == 2.0
    finally:
        paper.close()
