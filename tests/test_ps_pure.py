"""The parameter-server family's pure parts against literal tables: shards, BSP aggregation in
trainer order, the link fit, the overlap buckets, segments, and the launcher's decisions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgetrain.ps.family import iterations_per_epoch, plan_directive
from edgetrain.ps.gradient_sum import Aggregator, StaleClock, survivor_scale
from edgetrain.ps.hooks import backward_segments, segments
from edgetrain.ps.livecosts import fit_link, layer_costs
from edgetrain.ps.scheduled import buckets
from edgetrain.ps.sharding import layout_hash, loads, shard


def test_shards_balance_bytes_whole_tensors() -> None:
    sizes = [("a", 40), ("b", 10), ("c", 30), ("d", 20), ("e", 10)]
    # largest first onto the lightest server: a->0, c->1, d->1 (30 < 40), b->0, e->1? (50 vs 50
    # -> ties go to the lowest index: 0)
    assert shard(sizes, 2) == {"a": 0, "c": 1, "d": 1, "b": 0, "e": 0}
    assert loads(shard(sizes, 2), sizes, 2) == [60, 50]
    assert shard(sizes, 1) == dict.fromkeys("abcde", 0)
    with pytest.raises(ValueError):
        shard(sizes, 0)
    shapes = {n: (s,) for n, s in sizes}
    assert layout_hash(shard(sizes, 2), shapes) != layout_hash(shard(sizes, 1), shapes)


def test_aggregation_sums_in_trainer_order_whatever_the_arrival() -> None:
    grads = {
        0: np.array([1e8, 1.0], np.float32),
        1: np.array([1.0, 2.0], np.float32),
        2: np.array([-1e8, 3.0], np.float32),
    }
    expected = ((grads[0] + grads[1]) + grads[2]) / np.float32(3)
    for order in itertools.permutations(grads):
        agg = Aggregator([0, 1, 2])
        for t in order:
            assert agg.ready() is None
            assert agg.push(0, t, grads[t]) is None
        mean = agg.ready()
        assert mean is not None and mean.tobytes() == expected.tobytes()  # bit for bit
        assert agg.next == 1 and agg.ready() is None


def test_aggregation_of_unjoined_gradients_is_bit_for_bit_the_joined_sum() -> None:
    from edgetrain.comm.wire import MAX_FRAME_BYTES, Chunked, Message, decode, encode

    n = MAX_FRAME_BYTES // 4 + 5  # two frames
    rng = np.random.default_rng(3)
    grads = {t: rng.standard_normal(n).astype(np.float32) for t in range(3)}
    expected = ((grads[0] + grads[1]) + grads[2]) / np.float32(3)
    for unjoined in ({0}, {1, 2}, {0, 1, 2}):
        agg = Aggregator([0, 1, 2])
        for t in (2, 0, 1):
            g: np.ndarray | Chunked = grads[t]
            if t in unjoined:
                msg = decode(encode(Message("x", "w", "r", tensors={"g": g})), "r", join=False)
                g = msg.chunked["g"]
            assert agg.push(0, t, g) is None
        mean = agg.ready()
        assert mean is not None and mean.tobytes() == expected.tobytes()


def test_aggregation_refuses_and_survives_a_failed_trainer() -> None:
    agg = Aggregator([0, 1])
    g = np.ones(2, np.float32)
    assert agg.push(0, 0, g) is None
    assert agg.push(0, 0, g) == "duplicate_push"
    assert agg.push(0, 7, g) == "unknown_trainer"
    assert agg.push(2, 1, g) == "early_push"
    assert agg.ready() is None
    agg.drop(1)  # trainer 1 failed: iteration 0 completes with trainer 0 alone
    mean = agg.ready()
    assert mean is not None and mean.tolist() == [1.0, 1.0]
    assert agg.push(0, 0, g) == "stale_push"


def test_a_rejoined_trainer_counts_again_from_the_next_iteration() -> None:
    agg = Aggregator([0, 1, 2])
    g = np.ones(2, np.float32)
    agg.drop(2)  # lost during iteration 0
    for it in range(2):
        assert agg.push(it, 0, g) is None and agg.push(it, 1, 2 * g) is None
        assert agg.ready() is not None
    assert agg.push(2, 0, g) is None  # trainer 0 is ahead when trainer 2 is taken back
    assert agg.add(2) == 2
    assert agg.ready() is None  # iteration 2 now waits for it
    assert agg.push(1, 2, g) == "stale_push"  # an iteration applied without it
    assert agg.push(2, 1, g) is None and agg.ready() is None
    assert agg.push(2, 2, 4 * g) is None
    mean = agg.ready()
    assert mean is not None and mean.tolist() == [2.0, 2.0]  # (1 + 1 + 4) / 3


def test_a_rejoined_trainers_clock_starts_at_the_slowest_live_one() -> None:
    clock = StaleClock([0, 1, 2])
    clock.drop(2)
    for it in range(3):
        assert clock.push(it, 0) is None
    assert clock.push(0, 1) is None and clock.push(1, 1) is None
    assert clock.add(2) == 2 and clock.version == 2  # the version does not go back
    assert clock.push(1, 2) == "stale_push" and clock.push(2, 2) is None
    assert clock.push(2, 1) is None and clock.version == 3


def test_link_fit_recovers_dt_and_bandwidth() -> None:
    samples = [(b, 0.002 + b / 12.5e6) for b in (1000, 10_000, 100_000, 1_000_000)]
    fit = fit_link(samples)
    assert fit is not None
    assert fit.dt == pytest.approx(0.002, rel=1e-6) and fit.bandwidth == pytest.approx(12.5e6)
    assert fit_link(samples[:1]) is None
    same = fit_link([(1000, 0.01), (1000, 0.03)])  # one size: the mean rate, dt unknown (0)
    assert same is not None and same.dt == 0.0 and same.bandwidth == pytest.approx(1000 / 0.02)
    costs = layer_costs([100, 300], np.array([1.0, 2.0]), np.array([3.0, 4.0]), fit, fit)
    assert costs.dt == pytest.approx(0.002) and costs.pt.tolist() == pytest.approx([8e-6, 2.4e-5])


def test_buckets_split_the_iteration() -> None:
    # compute 0-4 and 6-8, communication 3-7, in an iteration 0-10
    got = buckets(0.0, 10.0, [(0.0, 4.0), (6.0, 8.0)], [(3.0, 7.0)])
    assert got == {"compute_only": 4.0, "both": 2.0, "comm_only": 2.0, "neither": 2.0}


def test_segments_from_cuts() -> None:
    assert segments([2, 3], 5) == [(1, 2), (3, 3), (4, 5)]
    assert backward_segments([2, 3], 5) == [(4, 5), (3, 3), (1, 2)]
    assert segments([], 4) == [(1, 4)]


def test_the_launcher_decides_iterations_and_reads_plans() -> None:
    assert iterations_per_epoch([719, 718], 32) == 22 and iterations_per_epoch([5], 32) == 1
    doc = {"strategies": {"dynacomm": {"forward_cuts": [2], "backward_cuts": [1, 3]}}}
    plan = plan_directive(doc, "dynacomm", "plans/p.json", None)
    assert plan is not None and plan["chosen"] == 0
    assert plan["entries"] == [
        {"forward_cuts": [2], "backward_cuts": [1, 3], "bandwidth_Bps": None, "dt_s": None}
    ]
    again = plan_directive({"bandwidths": [doc]}, "dynacomm", "plans/p.json", None)
    assert again == plan
    assert plan_directive(doc, "ibatch", "plans/p.json", None) is None


def test_stale_clock_is_the_slowest_live_trainer() -> None:
    clock = StaleClock([0, 1], first_iteration=0)
    for it in range(3):  # trainer 0 runs three iterations ahead: the version does not move
        assert clock.push(it, 0) is None
    assert clock.version == 0
    assert clock.push(0, 1) is None and clock.version == 1
    assert clock.push(0, 1) == "stale_push"
    assert clock.push(2, 1) == "early_push"  # pushes come in order
    assert clock.push(0, 9) == "unknown_trainer"
    clock.drop(1)  # trainer 1 failed: trainer 0 alone sets the version
    assert clock.version == 3
    clock.drop(0)
    assert clock.version == 0


def test_stale_clock_resumes_at_a_checkpointed_version() -> None:
    clock = StaleClock([2, 3], first_iteration=40)
    assert clock.push(0, 2) == "stale_push" and clock.push(40, 2) is None
    assert clock.version == 40 and clock.push(40, 3) is None and clock.version == 41


def test_link_fit_ignores_a_stalled_transmission() -> None:
    # an unshaped link: every transmission about 1 ms whatever its size, and one large
    # transmission stalled for 60 ms. Least squares made this a 2 kB/s link; the robust fit
    # keeps the millisecond as dt and a bandwidth no transmission contradicts.
    sizes = [400, 4_000, 40_000, 200_000] * 10
    samples = [(b, 0.001 + b / 1e9) for b in sizes] + [(200_000, 0.060)]
    fit = fit_link(samples)
    assert fit is not None
    assert fit.dt == pytest.approx(0.001, rel=0.01)
    assert fit.bandwidth == pytest.approx(1e9, rel=0.01)
    flat = fit_link([(400, 0.0011), (40_000, 0.0010), (4_000, 0.0012)])  # size does not show
    assert flat is not None and flat.dt == pytest.approx(0.0011) and flat.bandwidth == 1e9


def test_link_fit_treats_a_few_header_bytes_as_one_size() -> None:
    # sequential: every pull is the whole model, and the header grows by a byte at iteration
    # 10; a slope across one byte would be jitter / 1 B, a link of a few kB/s
    samples = [(40_000 + (it >= 10), 0.0010 + 0.0004 * (it % 3)) for it in range(20)]
    fit = fit_link(samples)
    assert fit is not None and fit.dt == 0.0
    assert fit.bandwidth == pytest.approx(40_000 / 0.0014, rel=0.05)  # the mean rate


def test_the_survivors_learning_rate_follows_the_live_trainers() -> None:
    table = [  # live, trainers, mode -> factor
        (2, 2, "scaled", 1.0), (1, 2, "scaled", 0.5), (3, 4, "scaled", 0.75),
        (1, 2, "same", 1.0), (0, 2, "scaled", 0.0), (3, 2, "scaled", 1.0), (1, 0, "scaled", 1.0),
    ]  # fmt: skip
    for live, trainers, mode, factor in table:
        assert survivor_scale(live, trainers, mode) == factor, (live, trainers, mode)
