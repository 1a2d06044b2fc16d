"""The exchange rules of DLion, Gaia and Ako, pure, against literal tables and invariants: the
bandwidth-budgeted threshold with per-link residuals (what was sent plus the residual equals the
sum of the gradients), the sparse message checks, Gaia's significance filter, Ako's partitions,
selective propagation, weight exchange, link bandwidths and the iteration synchronisation."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from edgetrain.comm.wire import Message, decode, encode
from edgetrain.gossip.exchange.bandwidth import (
    LAN,
    MBIT,
    WAN,
    Bandwidth,
    link_class,
    starting_bandwidth,
)
from edgetrain.gossip.exchange.messages import Expectations, Header
from edgetrain.gossip.exchange.partitions import Window, bounds, partition_count
from edgetrain.gossip.exchange.selection import Route, choose_sites, default_count, wan_routes
from edgetrain.gossip.exchange.significance import Accumulator, significant, threshold_at
from edgetrain.gossip.exchange.sparse import (
    Payload,
    Residual,
    entries_for,
    payload_from,
    sparse_pays,
    validate,
)
from edgetrain.gossip.exchange.weightex import LossEwma, best_and_worst, due, largest_changes

# ------------------------------------------------------------------ DLion's threshold


@pytest.mark.parametrize(
    "budget, n, entries",
    [
        (800.0, 1000, 100),  # 8 bytes an entry
        (3992.0, 1000, 499),
        (4000.0, 1000, None),  # k = n / 2: dense (4 bytes an entry) is no bigger
        (1e9, 1000, None),
        (7.0, 1000, 1),  # at least one entry
        (0.0, 1000, 1),
    ],
)
def test_a_links_budget_sets_its_entries(budget, n, entries) -> None:
    assert entries_for(budget, n) == entries


@pytest.mark.parametrize(
    "n, k, bandwidth, select_s, pays",
    [
        # the compute testbed's LAN link: 421,642 entries, k = 132,057 at 54 MB/s saves 0.63 MB
        # (11.7 ms of link) and a 0.3-core host took about 16 ms to choose them: dense
        (421_642, 132_057, 54e6, 0.016, False),
        (421_642, 132_057, 54e6, 0.005, True),  # a full core (5 ms): sparse
        (421_642, 9_500, 4e6, 0.016, True),  # a WAN share: 1.6 MB saved is 0.4 s of link
        (1000, 500, 1e6, 0.0, False),  # k = n / 2 saves nothing
        (1000, 100, 0.0, 1.0, True),  # no bandwidth known: sparse
    ],
)
def test_a_sparse_message_must_save_more_link_time_than_its_selection_costs(
    n: int, k: int, bandwidth: float, select_s: float, pays: bool
) -> None:
    assert sparse_pays(n, k, bandwidth, select_s) is pays


def test_top_k_with_a_residual_literal() -> None:
    res = Residual(5, dtype=torch.float64)
    sent = res.take(torch.tensor([0.1, -5.0, 3.0, 0.2, -0.3], dtype=torch.float64), 2)
    assert sent.kind == "sparse" and sent.indices is not None
    assert sent.indices.tolist() == [1, 2] and sent.indices.dtype == np.int32
    assert sent.values.tolist() == [-5.0, 3.0] and sent.values.dtype == np.float32
    assert res.r.tolist() == pytest.approx([0.1, 0.0, 0.0, 0.2, -0.3])
    # next iteration: the residual competes with the new gradient
    nxt = res.take(torch.tensor([0.0, 0.0, 0.0, 0.0, -0.1], dtype=torch.float64), 1)
    assert nxt.indices is not None and nxt.indices.tolist() == [4]
    assert nxt.values.tolist() == pytest.approx([-0.4])


def test_per_link_invariant_sent_plus_residual_is_the_sum_of_gradients() -> None:
    """Exact in float64: the float32 rounding of what goes on the wire stays in the residual."""
    rng = np.random.default_rng(7)
    n = 257
    links = {"lan": 60, "wan": 5, "dense": None, "switching": 0}
    residuals = {name: Residual(n, dtype=torch.float64) for name in links}
    sent = {name: np.zeros(n) for name in links}
    total = np.zeros(n)
    for t in range(60):
        g = torch.from_numpy(rng.normal(scale=10.0 ** rng.integers(-3, 3), size=n))
        total += g.numpy()
        for name, k in links.items():
            k_now = (None if t % 3 == 0 else 17) if name == "switching" else k
            payload = residuals[name].take(g, k_now)
            if k_now is None:
                assert payload.kind == "dense" and payload.entries == n
            else:
                assert payload.entries == k_now  # |S| = k exactly
                idx = payload.indices
                assert idx is not None and idx.dtype == np.int32
                assert validate("sparse", n, payload.values, idx, 0) is None  # sorted, unique
            sent[name] += payload.dense()
            np.testing.assert_allclose(
                sent[name] + residuals[name].r.numpy(), total, rtol=0, atol=1e-9
            )


def test_relative_contribution_orders_by_change_against_the_weight() -> None:
    w = torch.tensor([100.0, 0.01, 1.0], dtype=torch.float64)
    res = Residual(3, dtype=torch.float64)
    payload = res.take(
        torch.tensor([1.0, 0.1, 0.5], dtype=torch.float64), 1, lambda v: v.abs() / (w.abs() + 1e-8)
    )
    assert payload.indices is not None and payload.indices.tolist() == [1]  # 0.1 / 0.01 = 10


# ------------------------------------------------------------------ the message checks

GOOD_IDX = np.array([0, 3, 9], dtype=np.int32)
GOOD_VAL = np.array([1.0, -2.0, 0.5], dtype=np.float32)


@pytest.mark.parametrize(
    "kind, values, indices, offset, reason",
    [
        ("sparse", GOOD_VAL, GOOD_IDX, 0, None),
        ("sparse", GOOD_VAL[:0], GOOD_IDX[:0], 0, None),
        ("sparse", GOOD_VAL, np.array([3, 0, 9], dtype=np.int32), 0, "bad_sparse_order"),
        ("sparse", GOOD_VAL, np.array([0, 3, 3], dtype=np.int32), 0, "bad_sparse_order"),
        ("sparse", GOOD_VAL, np.array([0, 3, 10], dtype=np.int32), 0, "bad_sparse_range"),
        ("sparse", GOOD_VAL, np.array([-1, 3, 9], dtype=np.int32), 0, "bad_sparse_range"),
        ("sparse", GOOD_VAL, GOOD_IDX.astype(np.int64), 0, "bad_sparse_indices"),
        ("sparse", GOOD_VAL, None, 0, "bad_sparse_indices"),
        ("sparse", GOOD_VAL[:2], GOOD_IDX, 0, "bad_payload_shape"),
        ("sparse", GOOD_VAL.astype(np.float64), GOOD_IDX, 0, "bad_payload_values"),
        ("sparse", np.array([1.0, np.nan, 0.0], np.float32), GOOD_IDX, 0, "non_finite"),
        ("sparse", np.array([1.0, np.inf, 0.0], np.float32), GOOD_IDX, 0, "non_finite"),
        ("sparse", GOOD_VAL.reshape(3, 1), GOOD_IDX, 0, "bad_payload_values"),
        ("dense", np.zeros(10, np.float32), None, 0, None),
        ("dense", np.zeros(9, np.float32), None, 0, "bad_payload_shape"),
        ("dense", np.zeros(10, np.float32), GOOD_IDX, 0, "bad_payload_shape"),
        ("slice", np.zeros(4, np.float32), None, 6, None),
        ("slice", np.zeros(4, np.float32), None, 7, "bad_payload_range"),
        ("slice", np.zeros(4, np.float32), None, -1, "bad_payload_range"),
        ("slice", np.zeros(4, np.float32), None, True, "bad_payload_shape"),
        ("bogus", GOOD_VAL, GOOD_IDX, 0, "bad_payload_kind"),
    ],
)
def test_sparse_message_validation_table(kind, values, indices, offset, reason) -> None:
    assert validate(kind, 10, values, indices, offset) == reason


def test_payloads_travel_on_the_wire_format_and_are_checked_on_receipt() -> None:
    payload = Payload("sparse", 10, GOOD_VAL, GOOD_IDX)
    msg = Message("grad", "w1", "run", 3, 0, {"t": 3, **payload.meta()}, payload.tensors())
    got = decode(encode(msg), "run", ("grad",))
    back = payload_from(got.meta, got.tensors, 10)
    assert isinstance(back, Payload)
    np.testing.assert_array_equal(back.dense(), payload.dense())
    assert back.dense()[[0, 3, 9]].tolist() == [1.0, -2.0, 0.5]
    assert payload_from(got.meta, got.tensors, 11) == "bad_payload_length"
    assert payload_from(got.meta, {**got.tensors, "x": GOOD_VAL}, 10) == "bad_payload_tensors"
    assert Header.parse({"t": 3, "origin": 2, "loss": 0.5, "m": 7}, 1) == Header(3, 2, 0.5, 7)
    assert Header.parse({"t": -1}, 1) is None and Header.parse({"t": "3"}, 1) is None
    assert Header.parse({"t": 4, "loss": float("nan")}, 1) == Header(4, 1, None, None)


# ------------------------------------------------------------------ Gaia


def test_gaia_significance_table() -> None:
    acc = torch.tensor([0.5, 0.01, -2.0, 0.0, 1e-6])
    w = torch.tensor([1.0, 1.0, 100.0, 0.0, 0.0])
    # step 0.1, v = 1%: |0.05| > 0.01 yes; |0.001| > 0.01 no; |0.2| > 1.0 no; 0 > 0 no;
    # a zero weight: any change at all
    assert significant(acc, w, 0.1, 0.01).tolist() == [True, False, False, False, True]
    assert threshold_at(0.01, 4, "sqrt-epoch") == pytest.approx(0.005)
    assert threshold_at(0.01, 4, "none") == 0.01


def test_gaia_accumulator_plus_sent_is_every_update_and_only_significant_entries_go() -> None:
    rng = np.random.default_rng(3)
    n = 200
    acc = Accumulator(n, dtype=torch.float64)
    w = torch.from_numpy(rng.normal(size=n))
    sent, total = np.zeros(n), np.zeros(n)
    for _ in range(40):
        g = torch.from_numpy(rng.normal(scale=0.05, size=n))
        total += g.numpy()
        acc.add(g)
        before = acc.acc.clone()
        payload = acc.take(w, 0.1, 0.01)
        expect = np.flatnonzero(significant(before, w, 0.1, 0.01).numpy())
        assert payload.indices is not None and payload.indices.tolist() == expect.tolist()
        sent += payload.dense()
        np.testing.assert_allclose(sent + acc.acc.numpy(), total, rtol=0, atol=1e-9)


# ------------------------------------------------------------------ Ako


@pytest.mark.parametrize(
    "k, model_bytes, bps, t_iter, p",
    [
        (4, 1.69e6, 100 * MBIT, 0.1, 5),  # gossip.md B.8's example
        (4, 1.69e6, 1000 * MBIT, 0.1, 1),  # the LAN carries it all
        (4, 1.69e6, 20 * MBIT, 0.1, 21),
        (1, 1.69e6, 100 * MBIT, 0.1, 1),
        (4, 1.69e6, 1.0, 0.1, 1000),  # never more partitions than entries
    ],
)
def test_ako_partition_count_table(k, model_bytes, bps, t_iter, p) -> None:
    assert partition_count(k, model_bytes, bps, t_iter, n=1000) == p


def test_ako_partitions_cover_the_vector() -> None:
    assert bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert bounds(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_ako_sends_every_slice_once_per_p_iterations_and_loses_nothing() -> None:
    rng = np.random.default_rng(5)
    n, p = 23, 4
    win = Window(n, p)
    sent, total = np.zeros(n), np.zeros(n)
    offsets: list[int] = []
    for t in range(30):
        g = torch.from_numpy(rng.normal(size=n))
        total += g.numpy()
        win.push(t, g)
        payload = win.take(t)
        assert payload.kind == "slice"
        offsets.append(payload.offset)
        sent += _dense64(win, payload)
        pending = win.pending(t).numpy()
        np.testing.assert_allclose(sent + pending, total, rtol=0, atol=1e-5)  # float32 wire
    starts = [s for s, _ in bounds(n, p)]
    for i in range(len(offsets) - p + 1):
        assert sorted(offsets[i : i + p]) == starts  # any p in a row: each slice once


def _dense64(win: Window, payload: Payload) -> np.ndarray:
    out = np.zeros(win.n)
    out[payload.offset : payload.offset + payload.entries] = payload.values
    return out


# ------------------------------------------------------------------ selective propagation


def test_every_worker_draws_the_same_sites_and_none_both_sends_and_receives() -> None:
    caps = {"a": 700.0, "b": 500.0, "c": 400.0, "d": 300.0}
    for t in range(200):
        s1, r1 = choose_sites(11, t, caps, 2, 2)
        assert (s1, r1) == choose_sites(11, t, dict(reversed(caps.items())), 2, 2)
        assert len(s1) == 2 and len(r1) == 2 and not set(s1) & set(r1)
    assert default_count(4) == 2 and default_count(2) == 1 and default_count(3) == 2


def test_senders_follow_capacity_and_receivers_its_inverse() -> None:
    caps = {"a": 600.0, "b": 300.0, "c": 100.0}
    sends, recvs = Counter[str](), Counter[str]()
    draws = 10_000
    for t in range(draws):
        s, r = choose_sites(1, t, caps, 1, 1)
        sends.update(s)
        recvs.update(r)
    for site, c in caps.items():  # S = 1: P(send) = C / sum C exactly
        assert sends[site] / draws == pytest.approx(c / 1000.0, abs=0.02)
    assert recvs["c"] > recvs["b"] > recvs["a"]  # receiving falls as capacity grows


def test_wan_routes_spread_a_sites_load_and_forward_inside_the_receiving_site() -> None:
    one = wan_routes(["a"], ["b"], {"a": [0, 1, 2], "b": [3]})
    assert one == [Route(0, 3, 3), Route(1, 3, 3), Route(2, 3, 3)]
    two = wan_routes(["a"], ["b"], {"a": [0, 1, 2], "b": [3, 4]})
    assert two == [
        Route(0, 3, 3), Route(0, 3, 4),
        Route(1, 4, 3), Route(1, 4, 4),
        Route(2, 3, 3), Route(2, 3, 4),
    ]  # fmt: skip


# ------------------------------------------------------------------ weight exchange


@pytest.mark.parametrize(
    "when, t, pi, expected",
    [
        ("none", 9, 0.0, False),
        ("periodic", 9, 0.95, True),
        ("periodic", 8, 0.5, False),
        ("early", 9, 0.19, True),
        ("early", 9, 0.20, False),
        ("late", 19, 0.79, False),
        ("late", 19, 0.80, True),
    ],
)
def test_weight_exchange_schedule_table(when, t, pi, expected) -> None:
    assert due(t, pi, when, 10, 0.2, 0.8) is expected


def test_best_sends_to_worst_with_ties_to_the_lower_id() -> None:
    assert best_and_worst({0: 0.5, 1: 0.9, 2: 0.2, 3: 0.9}) == (2, 1)
    assert best_and_worst({0: 0.5, 1: 0.5, 2: 0.7}) == (0, 2)
    assert best_and_worst({0: 0.5, 1: 0.5}) is None  # all alike: nobody to help
    assert best_and_worst({0: 0.5}) is None
    assert best_and_worst({0: float("nan"), 1: 0.3, 2: 0.4}) == (1, 2)
    assert largest_changes(torch.tensor([0.1, -3.0, 0.0, 2.0, 0.5]), 0.4).tolist() == [1, 3]
    ewma = LossEwma(3)  # alpha 0.5
    assert [ewma.update(x) for x in (4.0, 2.0, 2.0)] == [4.0, 3.0, 2.5]


# ------------------------------------------------------------------ links


def test_link_classes_and_their_starting_bandwidth() -> None:
    sites: dict[int, str | None] = {0: "a", 1: "a", 2: "a", 3: "b"}
    assert [link_class(0, q, sites) for q in (1, 2, 3)] == [LAN, LAN, WAN]
    assert link_class(0, 1, {}) == LAN  # no sites: one LAN
    lan, wan = 1000 * MBIT, 100 * MBIT
    got = starting_bandwidth(0, [1, 2, 3], sites, [0, 1, 2, 3], lan, wan)
    # the host's LAN link is shared by its 3 destinations; the site's WAN by the 3 flows out
    assert got == {1: lan / 3, 2: lan / 3, 3: wan / 3}
    # in the single-worker site, 3 flows leave it over the WAN as well
    assert starting_bandwidth(3, [0, 1, 2], sites, [0, 1, 2, 3], lan, wan)[0] == wan / 3


def test_live_bandwidth_takes_only_waited_for_sizable_acknowledgements() -> None:
    bw = Bandwidth(1e6, alpha=0.5)
    assert not bw.observe(100_000, 0.2, fresh=False)  # read after a busy step: not the link
    assert not bw.observe(1_000, 0.2, fresh=True)  # latency-bound
    assert bw.observe(100_000, 0.2, fresh=True)  # 0.5 MB/s
    assert bw.value == pytest.approx(0.75e6) and bw.samples == 1
    assert bw.observe(100_000, 1e-9, fresh=True)  # clamped at 4x the start
    assert bw.value == pytest.approx(0.5 * 0.75e6 + 0.5 * 4e6)
    static = Bandwidth(1e6, live=False)
    assert not static.observe(100_000, 0.2, fresh=True) and static.value == 1e6


# ------------------------------------------------------------------ synchronisation


def test_expectations_wait_for_what_is_missing_only() -> None:
    ex = Expectations()
    assert not ex.arrived(("grad", 2, 5))  # early: a faster peer's next iteration
    ex.expect([("grad", 1, 4), ("grad", 2, 4), ("grad", 2, 5)])
    assert ex.blocking(4) == [("grad", 1, 4), ("grad", 2, 4)]  # the early one is not missing
    assert ex.arrived(("grad", 1, 4))
    assert ex.blocking(3) == [] and ex.blocking(4) == [("grad", 2, 4)]
    assert ex.forget_origin(2) == 1 and ex.blocking(10) == []  # worker 2 failed
    ex.arrived(("grad", 3, 1))
    ex.prune(2)
    assert ex.early == set()


def test_top_k_takes_exactly_k_of_the_largest_in_order() -> None:
    """The partition-based selection against the definition, ties included (the lowest
    indices among scores tied at the k-th largest)."""
    from edgetrain.gossip.exchange.sparse import top_k

    rng = np.random.default_rng(0)
    for trial in range(400):
        n = int(rng.integers(1, 300))
        k = int(rng.integers(0, n + 3))
        if trial % 2:
            s = torch.from_numpy(rng.integers(0, 5, n).astype(np.float32))  # many ties
        else:
            s = torch.from_numpy(rng.standard_normal(n))
        got = top_k(s, k).tolist()
        want = sorted(sorted(range(n), key=lambda i: (-float(s[i]), i))[: min(k, n)])
        assert got == want


@pytest.mark.parametrize("n", [4096, 61706, 250_000])
def test_top_k_of_a_long_vector_narrowed_to_candidates_is_the_full_partitions(n: int) -> None:
    """Long vectors and small shares go through the sampled candidates' bound: the same k
    entries as the definition (a lexicographic sort), ties, constant runs and a bound that
    leaves fewer than k candidates (the full partition then) included."""
    from edgetrain.gossip.exchange.sparse import top_k_numpy

    rng = np.random.default_rng(n)
    cases = [
        np.abs(rng.standard_normal(n)).astype(np.float32),
        rng.integers(0, 7, n).astype(np.float32),  # ties everywhere
        np.zeros(n, np.float32),
        np.sort(np.abs(rng.standard_normal(n))).astype(np.float32),  # the sample misleads
    ]
    cases[3][::4096] = 50.0  # a few large ones
    for s in cases:
        for k in (1, 7, n // 1000 + 1, n // 100, n // 10, n // 4, n // 2):
            got = top_k_numpy(s, k)
            want = np.sort(np.lexsort((np.arange(n), -s))[:k])
            assert np.array_equal(got, want), (n, k)


def test_a_sample_that_sets_the_bound_too_high_falls_back_to_the_full_partition() -> None:
    from edgetrain.gossip.exchange import sparse

    n, k = 61706, 6170
    sparse.top_k_numpy(np.zeros(n, np.float32), k)  # draws the sample's positions for n
    at = sparse._SAMPLES[n]
    s = np.zeros(n, np.float32)
    s[at] = np.arange(1, at.size + 1, dtype=np.float32)  # only the sampled entries are large
    assert sparse._candidates(s, k) is None  # fewer than k at or over the bound
    want = np.sort(np.lexsort((np.arange(n), -s))[:k])
    assert np.array_equal(sparse.top_k_numpy(s, k), want)


def test_a_received_read_only_payload_adds_in_without_a_warning() -> None:
    import warnings

    from edgetrain.gossip.exchange.sparse import Payload

    vals = np.frombuffer(np.array([1.0, 2.0], np.float32).tobytes(), np.float32)
    assert not vals.flags.writeable  # as a message's values arrive
    target = torch.zeros(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Payload("sparse", 4, vals, np.array([1, 3], np.int32)).add_into(target)
        Payload("slice", 4, vals, None, 2).add_into(target)
    assert target.tolist() == [0.0, 1.0, 1.0, 4.0]


def test_a_residual_knows_when_it_holds_nothing() -> None:
    res = Residual(4)
    assert res.empty and res.exact  # float32 on the CPU: a dense take sends it as it is
    g = torch.tensor([1.0, -2.0, 3.0, 0.5])
    dense = res.take(g, None)
    assert res.empty and dense.values.tolist() == [1.0, -2.0, 3.0, 0.5]
    res.take(g, 2)  # a sparse take keeps the rest
    assert not res.empty and res.r.tolist() == [1.0, 0.0, 0.0, 0.5]
    res.take(None, None)
    assert res.empty and res.r.tolist() == [0.0] * 4
    res.add(g)  # selective DLion's per-site residual
    assert not res.empty
    assert not Residual(4, dtype=torch.float64).exact  # its float32 rounding stays behind
    wide = Residual(2, dtype=torch.float64)
    wide.take(torch.tensor([1.0, 1.0 + 1e-12], dtype=torch.float64), None)
    assert not wide.empty and wide.r.tolist()[1] != 0.0


def test_every_dense_link_of_an_iteration_shares_one_copy_of_the_gradient() -> None:
    """What DLion sends on a dense link with nothing held back is what that link's residual
    take would send, one copy for all such links, which the update's in-place change of the
    gradient does not reach (the transport may still hold it)."""
    from types import SimpleNamespace

    from edgetrain.gossip.exchange.dlion import DLion

    worker = SimpleNamespace(_dense=None, flat=SimpleNamespace(n=3))
    g = torch.tensor([0.5, -1.0, 2.0])
    first = DLion._dense_of(worker, g)  # type: ignore[arg-type]
    again = DLion._dense_of(worker, g)  # type: ignore[arg-type]
    assert again is first and first.kind == "dense"
    by_take = Residual(3).take(g, None)
    assert first.values.tolist() == by_take.values.tolist()
    g.add_(10.0)  # the update, in place
    assert first.values.tolist() == [0.5, -1.0, 2.0]
