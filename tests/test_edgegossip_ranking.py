"""EdgeGossip's accuracy-aware trainer (Algorithm 2 with the specification's fixes): the batch
filling on literal tables and brute force, and the random and shuffle arms."""

from __future__ import annotations

import numpy as np
import pytest

from edgetrain.gossip.edgegossip import ranking


def _csr(sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return offsets, np.arange(offsets[-1], dtype=np.int64)


def _subsets(batches: ranking.Batches, offsets: np.ndarray) -> list[list[int]]:
    """Each batch as the list of subset ids it holds (members are 0..N-1 in order here)."""
    owner = np.searchsorted(offsets, np.arange(offsets[-1]), side="right") - 1
    return [list(dict.fromkeys(int(owner[s]) for s in b)) for b in batches]


def test_the_specifications_worked_example() -> None:
    # gossip.md A.5: subsets of 12, 9, 15, 8, 11, 10, 7, ... in rank order, b = 64
    sizes = [12, 9, 15, 8, 11, 10, 7, 13, 9, 10, 14, 6]
    offsets, members = _csr(sizes)
    order = np.arange(len(sizes))
    batches = ranking.rank_and_fill(offsets, members, order, target=120, batch=64)
    assert [len(b) for b in batches] == [65, 59]  # the second ran out of subsets
    got = _subsets(batches, offsets)
    assert got[0] == [0, 1, 2, 3, 4, 5]
    assert got[1][0] == 6  # fix (a): the 7-point subset, not the 10-point one again


def test_literal_table_of_targets() -> None:
    sizes = [5, 5, 5, 5, 5, 5]  # 30 samples, b = 10
    offsets, members = _csr(sizes)
    order = np.array([3, 1, 4, 0, 5, 2])
    rows = {  # target -> batches of subsets
        0.0: [[3, 1]],  # fix (b): at least one batch
        9.0: [[3, 1]],
        10.0: [[3, 1]],  # fix (b): "<", the printed "<=" would take another
        11.0: [[3, 1], [4, 0]],
        30.0: [[3, 1], [4, 0], [5, 2]],
        1000.0 / 34: [[3, 1], [4, 0], [5, 2]],  # 29.4 -> overshoot < one batch
    }
    for target, want in rows.items():
        got = ranking.rank_and_fill(offsets, members, order, target, batch=10)
        assert _subsets(got, offsets) == want, target


def test_subsets_running_out_stop_the_epoch() -> None:
    offsets, members = _csr([7, 3, 4])
    # r = 1: every sample once, the loop ends although the last batch is short of b
    batches = ranking.rank_and_fill(offsets, members, np.array([2, 0, 1]), 14, batch=8)
    assert [len(b) for b in batches] == [11, 3]
    assert sorted(np.concatenate(batches).tolist()) == list(range(14))


def test_a_target_above_the_data_takes_further_passes() -> None:
    offsets, members = _csr([4, 4, 4])
    batches = ranking.rank_and_fill(offsets, members, np.array([1, 2, 0]), 24, batch=8)
    flat = np.concatenate(batches)
    assert len(flat) == 24 and np.bincount(flat).tolist() == [2] * 12  # each subset twice


def test_exact_batches_split_the_last_subset() -> None:
    offsets, members = _csr([12, 9, 15, 8])
    batches = ranking.rank_and_fill(offsets, members, np.arange(4), 40, batch=16, exact=True)
    assert [len(b) for b in batches] == [16, 16, 12]  # the third runs out of samples
    assert np.concatenate(batches).tolist() == list(range(44))
    one = ranking.rank_and_fill(offsets, members, np.array([3, 0]), 10, batch=16, exact=True)
    assert [b.tolist() for b in one] == [[36, 37, 38, 39, 40, 41, 42, 43, 0, 1, 2, 3, 4, 5, 6, 7]]


def test_brute_force_invariants() -> None:
    rng = np.random.default_rng(3)
    for _ in range(400):
        m = int(rng.integers(1, 40))
        sizes = rng.integers(1, 15, size=m).tolist()
        offsets, members = _csr(sizes)
        n = int(offsets[-1])
        order = rng.permutation(m)
        b = int(rng.integers(1, 40))
        target = float(rng.uniform(0, 1.2)) * n
        batches = ranking.rank_and_fill(offsets, members, order, target, b)
        used = [s for bt in _subsets(batches, offsets) for s in bt]
        processed = sum(len(x) for x in batches)
        if target <= n:
            assert len(used) == len(set(used))  # no subset twice
            assert used == order[: len(used)].tolist()  # a prefix of the ranking
            assert processed >= min(target, n)
        assert processed < target + b + max(sizes)
        assert len(batches) >= 1
        assert all(len(x) >= b for x in batches[:-1])


def test_rank_order_is_stable_and_puts_nan_last() -> None:
    order = ranking.rank_order(np.array([0.5, 2.0, np.nan, 2.0, 1.0]))
    assert order.tolist() == [1, 3, 4, 0, 2]


def test_oracle_ranks_single_samples() -> None:
    offsets, members = ranking.singletons(5)
    order = ranking.rank_order(np.array([0.1, 0.9, 0.3, 0.7, 0.2]))
    batches = ranking.rank_and_fill(offsets, members, order, 3, batch=2)
    assert [b.tolist() for b in batches] == [[1, 3], [2, 4]]


def test_random_and_shuffled_arms() -> None:
    rng = np.random.default_rng(0)
    batches = ranking.random_fill(100, 40, 16, rng)
    assert [len(b) for b in batches] == [16, 16, 16]
    assert len(set(np.concatenate(batches).tolist())) == 48
    assert ranking.random_fill(0, 10, 4, rng) == []
    offsets, members = _csr([10, 10, 10])
    kept = ranking.rank_and_fill(offsets, members, np.array([2, 0, 1]), 15, batch=8)
    mixed = ranking.shuffled(kept, 8, np.random.default_rng(1))
    assert sorted(np.concatenate(mixed).tolist()) == sorted(np.concatenate(kept).tolist())
    assert [len(b) for b in mixed] == [8, 8, 4] and ranking.kept(mixed) == 20


def test_bad_batch_size_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ranking.rank_and_fill(*_csr([3]), np.array([0]), 3, batch=0)


@pytest.mark.parametrize(
    ("total", "share", "factor", "want"),
    [
        (200, 0.18, 2.0, 72),  # ceil(2 x 0.18 x 200)
        (200, 0.25, 2.0, 100),
        (200, 0.5, 2.0, 200),  # 2 r >= 1: all of them
        (200, 1.7, 2.0, 200),  # a redistributed share
        (200, 0.0, 2.0, 1),  # r = 0 still takes part: at least one point
        (200, 0.18, 0.0, 200),  # 0: the paper's, every point
        (7, 0.1, 1.0, 1),
        (0, 0.5, 2.0, 0),
    ],
)
def test_sampled_ranks_in_proportion_to_the_share(
    total: int, share: float, factor: float, want: int
) -> None:
    assert ranking.sampled(total, share, factor) == want


def test_sample_order_ranks_the_sample_and_keeps_the_rest_after_it() -> None:
    pick = np.array([5, 2, 7])
    order = ranking.sample_order(pick, np.array([0.1, 0.9, 0.5]), np.array([0, 6, 1, 3, 4]))
    assert order.tolist() == [2, 7, 5, 0, 6, 1, 3, 4]


@pytest.mark.parametrize(
    ("share", "shuffled", "want"),
    [
        (1.0, True, 0),  # a whole pass keeps every subset: no ranking
        (2.0, True, 0),
        (1.25, True, 100),  # the last pass's quarter: ceil(2 x 0.25 x 200)
        (1.0, False, 200),  # rank order: the order is the batches'
        (0.1, True, 40),
        (0.0, True, 1),  # r = 0 still trains one minibatch
    ],
)
def test_to_rank_needs_no_ranking_for_whole_shuffled_passes(
    share: float, shuffled: bool, want: int
) -> None:
    assert ranking.to_rank(200, share, 2.0, shuffled) == want


@pytest.mark.parametrize("factor", [0.0, 1.0, 2.0, 3.5])
@pytest.mark.parametrize("shuffled", [True, False])
@pytest.mark.parametrize("share", [0.0, 0.05, 0.3, 0.5, 0.99, 1.0, 1.4, 2.0, 2.7])
def test_ranked_share_is_to_rank_without_rounding(
    share: float, shuffled: bool, factor: float
) -> None:
    # the cost model's share (EdgeShape.ranked_share) and the runner's count are one rule:
    # over a large shard the count, as a share, is the share to within its rounding
    total = 100_000
    got = ranking.to_rank(total, share, factor, shuffled) / total
    assert got == pytest.approx(ranking.ranked_share(share, factor, shuffled), abs=2 / total)
