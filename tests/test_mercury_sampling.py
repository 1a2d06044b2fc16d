"""Mercury's group-wise importance sampling against literal tables and brute force, and the
exactly unbiased weight against the paper's p/q over many draws (specs/ps.md §2.3.4)."""

from __future__ import annotations

import numpy as np
import pytest

from edgetrain.ps.mercury.group_sampling import (
    NEVER,
    ImportanceCache,
    Sampler,
    all_inclusive,
    default_beta,
    group_probs,
    groups,
    slot_counts,
    slot_counts_row,
    uniform_batch,
    within_probs,
)

DRAWS = 200_000


def _cache(sizes_and_stamps: list[tuple[int, int]], seed: int = 3) -> tuple[np.ndarray, ...]:
    """Importance, stamps and a fixed scalar "gradient" per sample, cohorts as given."""
    rng = np.random.default_rng(seed)
    stamp = np.concatenate([np.full(m, s, np.int64) for m, s in sizes_and_stamps])
    rng.shuffle(stamp)
    importance = rng.uniform(0.05, 3.0, len(stamp))
    grad = rng.normal(size=len(stamp)) + 2.0 * importance  # correlated with importance
    return importance, stamp, grad


def _z(importance, stamp, grad, t, beta, smoothing, weights, seed=11) -> float:
    """(mean of the weighted estimate - true mean) / its standard error, over DRAWS draws."""
    sampler = Sampler.of(importance, stamp, t, beta, smoothing)
    d = sampler.draw_many(8, 2, np.random.default_rng(seed), DRAWS, weights)
    estimates = (d.weights * grad[d.indices]).mean(axis=1)
    se = estimates.std(ddof=1) / np.sqrt(DRAWS)
    return float((estimates.mean() - grad.mean()) / se)


# four unequal cohorts aged 1, 2, 3 and a never-refreshed one aged t + 1 = 4
FOUR = [(4, 2), (10, 1), (6, 0), (20, NEVER)]
# at beta = 5 the oldest of four cohorts would be drawn about once in 10^7 slots: the mean of
# 200 000 draws could not see it, whatever the weight; two cohorts aged 1 and 2 keep the test
# able to tell an unbiased weight from a biased one
TWO = [(7, 2), (13, 1)]


@pytest.mark.parametrize("smoothing", [0.5, 0.0])
@pytest.mark.parametrize(("beta", "cohorts"), [(0.0, FOUR), (0.5, FOUR), (5.0, TWO)])
def test_the_exact_weight_is_unbiased(beta: float, cohorts: list, smoothing: float) -> None:
    importance, stamp, grad = _cache(cohorts)
    assert abs(_z(importance, stamp, grad, 3, beta, smoothing, "exact")) < 4


@pytest.mark.parametrize("smoothing", [0.5, 0.0])
def test_the_papers_p_over_q_is_biased_at_large_beta(smoothing: float) -> None:
    importance, stamp, grad = _cache(TWO)
    assert abs(_z(importance, stamp, grad, 3, 5.0, smoothing, "paper")) > 4  # finding 4


def test_the_exact_weight_is_the_papers_with_beta_0_equal_groups_and_equal_counts() -> None:
    importance, stamp, _ = _cache([(10, 2), (10, 1), (10, 0), (10, NEVER)])
    sampler = Sampler.of(importance, stamp, 3, 0.0, 0.5)
    exact = sampler.draw_many(8, 2, np.random.default_rng(5), 500, "exact")
    paper = sampler.draw_many(8, 2, np.random.default_rng(5), 500, "paper")
    assert (exact.counts == 4).all()  # b_s = B / d
    assert (exact.indices == paper.indices).all()
    np.testing.assert_allclose(exact.weights, paper.weights, rtol=1e-12)


def test_groups_are_refresh_cohorts_freshest_first() -> None:
    stamp = np.array([4, NEVER, 2, 4, 2, NEVER, 4], np.int64)
    g = groups(stamp, 5)
    assert g.stamps.tolist() == [4, 2, NEVER]
    assert [m.tolist() for m in g.members] == [[0, 3, 6], [2, 4], [1, 5]]
    assert g.ages.tolist() == [1.0, 3.0, 6.0]  # never refreshed: t + 1
    assert g.sizes.tolist() == [3, 2, 2]


def test_group_probabilities_are_a_stable_softmax_of_minus_beta_age() -> None:
    r = group_probs(np.array([1.0, 2.0, 4.0]), 0.5)
    expected = np.exp([-0.5, -1.0, -2.0])
    np.testing.assert_allclose(r, expected / expected.sum())
    huge = group_probs(np.array([1.0, 1e6]), 50.0)  # no overflow, no NaN
    assert huge.tolist() == [1.0, 0.0]
    np.testing.assert_allclose(group_probs(np.array([3.0, 9.0]), 0.0), [0.5, 0.5])
    # unequal cohorts: a group's share also scales with its size (a 7-sample sliver of an
    # older cohort next to 352 fresh samples gets 7/359 e^-1 of the weight, not 27%)
    sliver = group_probs(np.array([1.0, 2.0]), 1.0, np.array([352, 7]))
    expected = np.array([352.0, 7.0 * np.exp(-1.0)])
    np.testing.assert_allclose(sliver, expected / expected.sum())
    assert sliver[1] < 0.01


def test_slot_counts_round_by_largest_remainder_with_one_draw_per_slot() -> None:
    rows = [[10, 10], [30, 10], [1, 1000]]
    got = [slot_counts(np.array([row], dtype=float), 8)[0].tolist() for row in rows]
    assert got == [[4, 4], [6, 2], [1, 7]]  # 0.008 rounds to 0: the slot still gets one
    assert slot_counts(np.array([[1, 1, 100]], dtype=float), 5).tolist() == [[1, 1, 3]]
    assert slot_counts(np.array([[5, 5, 5]], dtype=float), 5).tolist() == [[2, 2, 1]]  # ties
    rows = np.random.default_rng(0).integers(1, 50, size=(1000, 3)).astype(float)
    counts = slot_counts(rows, 7)
    assert (counts.sum(axis=1) == 7).all() and (counts >= 1).all()
    with pytest.raises(ValueError, match="cannot give 3 slots"):
        slot_counts(np.array([[1.0, 1.0, 1.0]]), 2)


def test_smoothing_bounds_every_weight_within_a_group() -> None:
    imp = np.array([0.0, 0.0, 0.0, 9.0])
    q = within_probs(imp, 0.5)
    # mean 2.25, so every score gains 1.125: [1.125, 1.125, 1.125, 10.125] / 13.5
    np.testing.assert_allclose(q, np.array([1.125, 1.125, 1.125, 10.125]) / 13.5)
    assert (1.0 / (len(imp) * q)).max() <= (1 + 0.5) / 0.5 + 1e-12  # (1 + lambda) / lambda
    assert within_probs(np.zeros(3), 0.0).tolist() == pytest.approx([1 / 3] * 3)  # no zero q


def test_default_beta_is_one_over_the_effective_group_count() -> None:
    assert default_beta(2000, 200) == pytest.approx(0.1)
    assert default_beta(2000, 300) == pytest.approx(1 / 7)  # ceil(2000 / 300)
    assert default_beta(10, 0) == 0.0


def test_the_cache_refreshes_round_robin_and_stamps() -> None:
    cache = ImportanceCache.fresh(5, 1.0, np.random.default_rng(0))
    order = cache.order.tolist()
    first = cache.next_chunk(3)
    second = cache.next_chunk(3)
    assert first.tolist() == order[:3] and second.tolist() == order[3:] + order[:1]
    cache.store(first, np.array([0.5, -1.0, 2.0]), 7)
    assert cache.importance[first].tolist() == [0.5, 0.0, 2.0]  # a loss is never negative
    assert cache.stamp[first].tolist() == [7, 7, 7] and cache.refreshed() == 3
    assert len(cache.next_chunk(99)) == 5  # at most N


def test_all_inclusive_weights_are_one_over_n_q() -> None:
    imp = np.array([1.0, 2.0, 3.0, 4.0])
    idx, w = all_inclusive(imp, 6, 0.5, np.random.default_rng(2))
    q = within_probs(imp, 0.5)
    np.testing.assert_allclose(w, 1.0 / (4 * q[idx]))


def test_uniform_batches_cover_each_local_epoch_once() -> None:
    seen = np.concatenate([uniform_batch(10, 3, t, [1, 2])[0] for t in range(3)])
    assert sorted(seen.tolist()) == sorted(set(seen.tolist())) and len(seen) == 9
    again = uniform_batch(10, 3, 1, [1, 2])[0]
    assert again.tolist() == seen[3:6].tolist()  # stateless: the same iteration, same batch
    assert uniform_batch(10, 3, 0, [1, 2])[1].tolist() == [1.0, 1.0, 1.0]


def test_a_draw_scores_only_the_groups_it_picks_and_draws_as_if_it_scored_all() -> None:
    importance, stamp, _ = _cache([(30, s) for s in range(40)])
    sampler = Sampler.of(importance, stamp, 40, 0.05, 0.5)
    idx, w = sampler.draw(32, 2, np.random.default_rng(7))
    assert 1 <= len(sampler._q) <= 2  # of 40 groups
    # the same draw with every group's q computed first (the eager sampler it replaces)
    eager = Sampler.of(importance, stamp, 40, 0.05, 0.5)
    for g, members in enumerate(eager.groups.members):
        np.testing.assert_array_equal(eager.q(g), within_probs(importance[members], 0.5))
    idx2, w2 = eager.draw(32, 2, np.random.default_rng(7))
    assert idx.tolist() == idx2.tolist()
    np.testing.assert_array_equal(w, w2)


def test_a_rescore_keeps_the_stamps() -> None:
    cache = ImportanceCache.fresh(6, 1.0, np.random.default_rng(0))
    cache.store(np.array([0, 1, 2]), np.array([0.5, 0.6, 0.7]), 4)
    cache.rescore(np.array([1, 1, 5]), np.array([2.0, 2.0, -1.0]))
    assert cache.importance.tolist() == [0.5, 2.0, 0.7, 1.0, 1.0, 0.0]  # losses floored at 0
    assert cache.stamp.tolist() == [4, 4, 4, NEVER, NEVER, NEVER]


def test_with_batch_refresh_a_refresh_keeps_the_cache_one_group() -> None:
    """T2's refresh (``MercuryDevice._refresh``) stamps its chunk in the paper's BACC, and
    only rescores it with ``batch_refresh``: the cache stays one group."""
    from types import SimpleNamespace

    from edgetrain.ps.mercury.device import MercuryDevice

    for batch_refresh, stamps in ((False, {7}), (True, {NEVER})):
        device = SimpleNamespace(
            cache=ImportanceCache.fresh(8, 1.0, np.random.default_rng(0)),
            cfg=SimpleNamespace(batch_refresh=batch_refresh),
            scorer=SimpleNamespace(losses=lambda x, y: np.full(len(x), 0.25)),
            _batch=lambda sel: (sel, sel),
        )
        assert MercuryDevice._refresh(device, 3, 7) == 3  # type: ignore[arg-type]
        idx = device.cache.order[:3]
        assert device.cache.importance[idx].tolist() == [0.25] * 3
        assert set(device.cache.stamp[idx].tolist()) == stamps
        assert len(groups(device.cache.stamp, 8).members) == (1 if batch_refresh else 2)


def test_groups_match_a_brute_force_grouping() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        stamp = rng.choice(np.array([NEVER, 0, 1, 2, 5, 9], np.int64), size=n)
        g = groups(stamp, 10)
        by_stamp: dict[int, list[int]] = {}
        for i, s in enumerate(stamp.tolist()):
            by_stamp.setdefault(s, []).append(i)
        want = sorted(by_stamp, reverse=True)  # freshest first
        assert g.stamps.tolist() == want
        assert [m.tolist() for m in g.members] == [by_stamp[s] for s in want]
        assert g.sizes.tolist() == [len(by_stamp[s]) for s in want]
        assert g.ages.tolist() == [11.0 if s == NEVER else float(10 - s) for s in want]


def test_one_rows_slot_counts_are_the_vectorised_ones() -> None:
    rng = np.random.default_rng(6)
    for _ in range(2000):
        d = int(rng.integers(1, 5))
        sizes = rng.integers(1, 200, size=d)
        batch = int(rng.integers(d, 70))
        want = slot_counts(sizes[None, :], batch)[0].tolist()
        assert slot_counts_row(sizes.tolist(), batch) == want
    assert slot_counts_row([1, 1000], 2) == [1, 1]  # every slot at least one draw
    with pytest.raises(ValueError):
        slot_counts_row([3, 4, 5], 2)


@pytest.mark.parametrize("weights", ["exact", "paper"])
def test_one_draw_is_draw_many_of_one_draw_for_draw(weights: str) -> None:
    """The per-iteration draw takes the same random numbers as draw_many(count=1): the same
    indices and bit-identical weights, a group chosen for both slots included."""
    rng = np.random.default_rng(7)
    for trial in range(300):
        cohorts = [(int(rng.integers(1, 40)), int(s)) for s in rng.choice(30, 4, replace=False)]
        if trial % 3 == 0:
            cohorts.append((int(rng.integers(1, 40)), int(NEVER)))
        importance, stamp, _ = _cache(cohorts, seed=trial)
        beta = float(rng.choice([0.0, 0.1, 1.0]))
        sampler = Sampler.of(importance, stamp, 40, beta, 0.5)
        slots = int(rng.integers(1, 4))
        batch = int(rng.integers(slots, 40))
        idx, w = sampler.draw(batch, slots, np.random.default_rng([trial, 1]), weights)
        many = sampler.draw_many(batch, slots, np.random.default_rng([trial, 1]), 1, weights)
        assert idx.tolist() == many.indices[0].tolist()
        assert w.tobytes() == many.weights[0].tobytes()
