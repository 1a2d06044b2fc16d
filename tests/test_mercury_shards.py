"""Mercury's multi-parameter-server arithmetic against literal tables: slices of the flat
vector, the owner's weighted average in device order, the replica hash, the launcher's
decisions (sizes, hash checks, stop at accuracy, the run's model)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgetrain.comm.control import HandIn, Role
from edgetrain.ps.mercury.shards import Averager, bounds, device_weights, diverged, weights_hash
from edgetrain.ps.mercury.side import MercuryController, final_model
from edgetrain.recipe import parse_recipe
from edgetrain.runtime.base import HandInError


def test_slices_of_the_flat_vector_balance_bytes() -> None:
    assert bounds(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert bounds(61706, 4) == [(0, 15426), (15426, 30853), (30853, 46279), (46279, 61706)]
    assert bounds(3, 1) == [(0, 3)]
    with pytest.raises(ValueError):
        bounds(3, 0)


def test_device_weights_follow_local_dataset_sizes() -> None:
    assert device_weights([2000, 2000, 2000, 2000]).tolist() == [0.25] * 4
    assert device_weights([1, 1, 2]).tolist() == [0.25, 0.25, 0.5]
    with pytest.raises(ValueError):
        device_weights([0, 0])


def test_an_owner_averages_its_slice_weighted_in_device_order_whatever_the_arrival() -> None:
    slices = {
        0: np.array([1e8, 1.0, 4.0], np.float32),
        1: np.array([1.0, 2.0, 4.0], np.float32),
        2: np.array([-1e8, 3.0, 4.0], np.float32),
    }
    w = device_weights([1, 1, 2])  # 0.25, 0.25, 0.5
    # the literal table: 0.25*1e8 + 0.25*1 - 0.5*1e8 in float32 (the 0.25 is lost), in device order
    expected = np.float32(0.25) * slices[0]
    expected += np.float32(0.25) * slices[1]
    expected += np.float32(0.5) * slices[2]
    assert expected.tolist() == [-25000000.0, 2.25, 4.0]
    for order in itertools.permutations(slices):
        avg = Averager(w, 3)
        for d in order:
            assert avg.ready() is None
            assert avg.add(0, d, slices[d]) is None
        got = avg.ready()
        assert got is not None and got.tobytes() == expected.tobytes()  # bit for bit
        assert avg.next == 1 and avg.ready() is None


def test_an_owner_refuses_slices_it_cannot_use() -> None:
    avg = Averager(device_weights([1, 1]), 2)
    g = np.ones(2, np.float32)
    assert avg.add(0, 0, g) is None
    assert avg.add(0, 0, g) == "duplicate_slice"
    assert avg.add(0, 5, g) == "unknown_device"
    assert avg.add(0, 1, np.ones(3, np.float32)) == "bad_slice_shape"
    assert avg.add(2, 1, g) == "early_slice"  # a device is at most one iteration ahead
    assert avg.add(1, 1, g) is None  # the next iteration waits its turn
    assert avg.add(0, 1, g) is None
    assert avg.ready() is not None and avg.ready() is None  # iteration 1 lacks device 0
    assert avg.add(0, 1, g) == "stale_slice"


def test_replica_hashes_name_the_devices_that_diverged() -> None:
    flat = np.arange(6, dtype=np.float32)
    h = weights_hash(flat)
    assert len(h) == 16 and h == weights_hash(flat.copy())
    other = flat.copy()
    other[3] = np.nextafter(other[3], np.float32(9))  # one ulp
    assert weights_hash(other) != h
    assert diverged({0: h, 1: h, 2: h}) == []
    assert diverged({0: h, 1: "x" * 16, 2: h, 3: "y" * 16}) == [1, 3]


RECIPE = """
[train]
family = "ps"
technique = "mercury"
batch_size = 32
[mercury]
stop_accuracy = 0.9
{extra}
[[workers]]
count = 4
"""


def _controller(extra: str = "") -> MercuryController:
    recipe = parse_recipe(__import__("tomllib").loads(RECIPE.format(extra=extra)))
    return MercuryController(recipe, [Role("trainer", i) for i in range(4)])


def test_the_controller_gives_sizes_iterations_and_rounds() -> None:
    ready = {i: {"samples": 2000 - i, "weights_hash": "a" * 16} for i in range(4)}
    decision = _controller().on_start(ready)
    assert decision.halt is None
    assert decision.directive(2) == {
        "iterations": 62,  # the smallest local epoch: 1997 // 32
        "round_iterations": 62,
        "sizes": [2000, 1999, 1998, 1997],
    }
    custom = _controller("epoch_iterations = 20\nreshard_every = 7").on_start(ready)
    assert custom.directive(0)["iterations"] == 20 and custom.directive(0)["round_iterations"] == 7


def test_the_controller_halts_on_a_diverged_replica_and_stops_at_the_accuracy() -> None:
    c = _controller()
    ready = {i: {"samples": 100, "weights_hash": "a" * 16} for i in range(4)}
    ready[2]["weights_hash"] = "b" * 16
    assert c.on_start(ready).halt == (
        "replicas diverged before training: device 2 holds other weights than device 0"
    )
    reports = {i: {"weights_hash": "a" * 16, "test_accuracy": None} for i in range(4)}
    reports[0]["test_accuracy"] = 0.85
    assert c.on_barrier(1, reports).directive(0) == {}
    reports[0]["test_accuracy"] = 0.9
    assert all(c.on_barrier(2, reports).directive(i) == {"stop": True} for i in range(4))
    reports[3]["weights_hash"] = "c" * 16
    assert "device 3" in (c.on_barrier(3, reports).halt or "")


def test_the_runs_model_is_device_0s_replica_once_every_hash_agrees() -> None:
    roles = [Role("trainer", i) for i in range(3)]
    w = {"fc.weight": np.ones(2, np.float32), "optim.0.exp_avg": np.zeros(2, np.float32)}
    handins = {i: HandIn(dict(w), {"weights_hash": "a" * 16}) for i in range(3)}
    model = final_model(handins, roles)
    assert set(model.weights) == {"fc.weight"}
    assert model.info == {"replicas": 3, "replica_hash": "a" * 16, "hashes_agree": True}
    handins[1] = HandIn(dict(w), {"weights_hash": "b" * 16})
    with pytest.raises(HandInError, match="device 1 holds other weights"):
        final_model(handins, roles)
