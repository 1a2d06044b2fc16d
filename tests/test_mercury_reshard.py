"""Mercury's resharding plan against literal tables and a brute-force round: every device and
every cohort keeps its size, the budget holds, aware choice follows importance cohort by
cohort, and the samples are swapped, never lost or doubled (specs/ps.md §2.4)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from edgetrain.ps.mercury import reshard
from edgetrain.ps.mercury.codec import SampleCodec
from edgetrain.ps.mercury.group_sampling import NEVER


def test_budget_and_offer_literals() -> None:
    # 1.25 MB/s x 20 ms x 62 iterations / 800 B = 1937 samples; N_p = 1000 caps it
    assert reshard.bandwidth_budget(1000, 1.25e6, 0.02, 62, 800) == 1000
    assert reshard.bandwidth_budget(1000, 1.25e5, 0.02, 62, 800) == 193
    assert reshard.bandwidth_budget(1000, 0.0, 0.02, 62, 800) == 0
    assert reshard.outgoing("agnostic", 2000, 0.5, 300) == 1000  # N_p
    assert reshard.outgoing("aware", 2000, 0.5, 300) == 300  # N_o
    assert reshard.outgoing("random", 2000, 0.5, 5000) == 1000  # N_o <= N_p
    assert reshard.outgoing("none", 2000, 0.5, 300) == 0
    assert reshard.initiator(3, 1) == 1


def test_quotas_spread_by_cohort_size() -> None:
    assert reshard.quotas(np.array([10, 30, 60]), 10).tolist() == [1, 3, 6]
    assert reshard.quotas(np.array([1, 1, 1]), 2).tolist() == [1, 1, 0]  # ties: lower first
    assert reshard.quotas(np.array([5, 1]), 100).tolist() == [5, 1]  # never more than held
    assert reshard.quotas(np.array([5, 1]), 0).tolist() == [0, 0]


def test_aware_choice_is_cohort_proportional_distinct_and_by_importance() -> None:
    rng = np.random.default_rng(0)
    stamp = np.array([3] * 20 + [2] * 60 + [NEVER] * 20, np.int64)
    importance = np.where(np.arange(100) % 10 == 0, 50.0, 0.01)  # every 10th sample important
    exclude = np.array([0, 20])
    chosen = reshard.choose(importance, stamp, 10, "aware", 0.0, rng, exclude)
    assert len(set(chosen.tolist())) == 10 and not set(chosen.tolist()) & {0, 20}
    by_cohort = Counter(int(stamp[i]) for i in chosen)
    assert by_cohort == {3: 2, 2: 6, NEVER: 2}  # 10 x 20/100, 60/100, 20/100
    assert sum(importance[chosen] == 50.0) >= 8  # the important ones move
    agnostic = reshard.choose(importance, stamp, 50, "agnostic", 0.5, rng, exclude)
    assert len(set(agnostic.tolist())) == 50 and not set(agnostic.tolist()) & {0, 20}


def test_a_round_plan_splits_evenly_and_answers_symmetrically() -> None:
    plan = reshard.RoundPlan.split(4, np.arange(10), [0, 2, 3], np.random.default_rng(1))
    assert sorted(len(v) for v in plan.lists.values()) == [3, 3, 4]
    assert sorted(np.concatenate(list(plan.lists.values())).tolist()) == list(range(10))
    assert plan.answer(0, 5, 2) is None  # a later round: not planned here yet
    assert plan.answer(0, 3, 2).tolist() == []  # an older round: nothing
    n0 = len(plan.lists[0])
    first = plan.answer(0, 4, 2)
    assert len(first) == 2 and plan.remaining(0) == n0 - 2
    rest = plan.answer(0, 4, 10)  # asks more than is left: the rest, and the pair ends
    assert len(rest) == n0 - 2 and plan.remaining(0) == 0 and 0 in plan.closed
    sent = plan.take(2, 3)
    kept = plan.settle(2, sent, 1)  # the peer answered one of three
    assert kept.tolist() == sent[:1].tolist() and plan.remaining(2) == 0


def _exchange(k: int, plans: dict[int, reshard.RoundPlan], per_chunk: int) -> list[tuple]:
    """Brute force: every pair swaps chunk by chunk, the lower device asking."""
    swaps = []
    for a in range(k):
        for b in range(a + 1, k):
            while plans[a].remaining(b) > 0:
                sent = plans[a].take(b, per_chunk)
                answered = plans[b].answer(a, plans[a].round, len(sent))
                assert answered is not None
                kept = plans[a].settle(b, sent, len(answered))
                swaps.append((a, kept, b, answered))
    return swaps


@pytest.mark.parametrize("mode", ["aware", "agnostic", "random"])
def test_a_round_keeps_every_size_and_cohort_and_respects_the_budget(mode: str) -> None:
    k, n, rho, budget = 4, 60, 0.5, 12
    rng = np.random.default_rng(7)
    data = {d: np.arange(d * 1000, d * 1000 + n) for d in range(k)}  # sample ids
    stamps = {d: rng.choice([5, 4, 3, NEVER], size=n) for d in range(k)}
    importance = {d: rng.uniform(0.01, 4, n) for d in range(k)}
    sizes = [n, n - 7, n, n - 3]  # unequal devices: the pair moves min of both offers
    data = {d: data[d][: sizes[d]] for d in range(k)}
    plans = {}
    for d in range(k):
        count = reshard.outgoing(mode, sizes[d], rho, budget)
        chosen = reshard.choose(
            importance[d][: sizes[d]], stamps[d][: sizes[d]], count, mode, 0.5, rng
        )
        assert len(chosen) == count <= (budget if mode != "agnostic" else int(rho * sizes[d]))
        peers = [j for j in range(k) if j != d]
        plans[d] = reshard.RoundPlan.split(0, chosen, peers, rng)
    before = Counter(int(x) for v in data.values() for x in v)
    cohorts = {d: Counter(stamps[d][: sizes[d]].tolist()) for d in range(k)}
    new = {d: data[d].copy() for d in range(k)}
    for a, kept, b, answered in _exchange(k, plans, per_chunk=2):
        assert len(kept) == len(answered)  # symmetric: equal both ways
        new[a][kept], new[b][answered] = data[b][answered], data[a][kept]
    for d in range(k):
        assert len(new[d]) == sizes[d]
        assert Counter(stamps[d][: sizes[d]].tolist()) == cohorts[d]  # slots keep their stamp
        moved = int((new[d] != data[d]).sum())
        assert moved <= plans[d].offered
    assert Counter(int(x) for v in new.values() for x in v) == before  # swapped, not lost
    assert any((new[d] != data[d]).any() for d in range(k))


def test_placement_puts_received_samples_into_the_freed_slots() -> None:
    x = np.zeros((4, 1, 2, 2), np.float32)
    y = np.array([0, 1, 2, 3])
    imp = np.ones(4)
    p = reshard.Placement(np.array([1, 3]), np.full((2, 1, 2, 2), 7, np.float32),
                          np.array([9, 8]), np.array([0.5, 0.25]))  # fmt: skip
    reshard.apply(x, y, imp, p)
    assert y.tolist() == [0, 9, 2, 8] and imp.tolist() == [1.0, 0.5, 1.0, 0.25]
    assert x[1].max() == 7 and x[0].max() == 0


def test_samples_travel_as_bytes_and_are_checked_on_receipt() -> None:
    raw = np.random.default_rng(0).integers(0, 256, size=(20, 1, 4, 4)).astype(np.float32)
    x_train = (raw / 255.0 - 0.13) / 0.31  # normalised as the loaders do
    codec = SampleCodec.of(x_train.astype(np.float32), 10)
    packed = codec.pack(
        x_train[:3], np.array([1, 2, 3]), np.array([0.5, 1, 2]), np.array([4, 4, 4])
    )
    assert (
        packed["x"].dtype == np.uint8
        and packed["x"].tobytes() == raw[:3].astype(np.uint8).tobytes()
    )
    np.testing.assert_allclose(codec.decode(packed["x"]), x_train[:3], rtol=0, atol=1e-5)
    assert codec.check(packed, 3) is None
    assert codec.sample_bytes == 16 + 16
    assert codec.check(packed, 2) == "bad_swap_count"
    assert codec.check({**packed, "y": np.array([1, 2, 10])}, 3) == "bad_swap_labels"
    assert codec.check({**packed, "x": packed["x"].astype(np.float32)}, 3) == "bad_swap_images"
    bad_imp = {**packed, "imp": np.array([1, np.nan, 1], np.float32)}
    assert codec.check(bad_imp, 3) == "bad_swap_importance"
    assert codec.check({k: v for k, v in packed.items() if k != "stamp"}, 3) == "bad_swap_tensors"
