"""The runtime's pure parts against literal tables: reliable delivery, roles and placement, the
gossip controller and resume rule, the training clock, and speed-ups."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgetrain.comm.control import ControlLog, HandIn, InOrder, Role, assign_roles
from edgetrain.gossip.drain import GossipController, drain_expectations
from edgetrain.gossip.family import spread_handins
from edgetrain.launch.placement import Need, PlacementError, place
from edgetrain.report.clock import Point, Report, attempt_curve, join_attempts, time_to
from edgetrain.report.compare import speedups
from edgetrain.report.summary import link_class
from edgetrain.runtime.base import HandInError
from edgetrain.tomlconfig import locate

# ------------------------------------------------------------------ delivery


def test_control_log_numbers_keeps_and_resends() -> None:
    log = ControlLog(resend_after_s=3.0)
    a = log.record(0, "welcome", {"x": 1}, 0, {}, now=0.0)
    b = log.record(0, "start", {}, 0, {}, now=1.0)
    c = log.record(1, "welcome", {}, 0, {}, now=1.0)
    assert (a.seq, b.seq, c.seq) == (1, 2, 1) and a.meta == {"x": 1, "seq": 1}
    assert log.stale(3.5) == [(0, a)]  # only what waited more than 3 s
    assert log.stale(3.6) == []  # just resent: not again so soon
    log.ack(0, 1)
    assert log.unacknowledged(0) == [2] and log.last(0) == 2
    assert [e.seq for e in log.after(0, 0, now=5.0)] == [2]
    assert [(w, e.seq) for w, e in log.stale(7.0)] == [(1, 1)]  # 0's start was resent at 5.0
    log.forget(1)
    assert log.unacknowledged(1) == [] and log.resent == 2


@pytest.mark.parametrize("order", list(itertools.permutations([1, 2, 3, 4])))
def test_in_order_delivers_each_number_once_in_order(order: tuple[int, ...]) -> None:
    receiver = InOrder()
    delivered: list[int] = []
    for seq in [*order, *order]:  # every message twice: resends and duplicates
        delivered += receiver.accept(seq, seq)
    assert delivered == [1, 2, 3, 4] and receiver.delivered == 4 and receiver.waiting == 0


def test_in_order_holds_back_after_a_gap() -> None:
    receiver = InOrder()
    assert receiver.accept(1, "a") == ["a"]
    assert receiver.accept(3, "c") == [] and receiver.waiting == 1
    assert receiver.accept(2, "b") == ["b", "c"]


# ------------------------------------------------------------------ roles and placement


def test_roles_are_numbered_within_each_role() -> None:
    roles = assign_roles(["server", "trainer", "trainer", "server", "trainer"])
    assert [str(r) for r in roles] == [
        "server:0",
        "trainer:0",
        "trainer:1",
        "server:1",
        "trainer:2",
    ]
    assert Role.parse("stage:12") == Role("stage", 12)
    for bad in ("trainer", "trainer:x", ":1", "a:-1"):
        with pytest.raises(ValueError):
            Role.parse(bad)


@pytest.mark.parametrize(
    ("needs", "slots", "expected"),
    [
        # in order without labels
        ([Need("trainer")] * 3, [(), (), ()], [0, 1, 2]),
        # servers on the ps host wherever it is in the file
        (
            [Need("trainer"), Need("trainer"), Need("server", prefer="ps")],
            [("worker",), ("ps",), ("worker",)],
            [0, 2, 1],
        ),
        # no ps host: servers on the first hosts
        (
            [Need("trainer"), Need("trainer"), Need("server", prefer="ps")],
            [(), (), ()],
            [1, 2, 0],
        ),
        # required labels first, then preferences, then the rest
        (
            [Need("trainer", labels=("gpu",)), Need("server", prefer="ps"), Need("trainer")],
            [("ps",), ("cpu",), ("gpu", "ps")],
            [2, 0, 1],
        ),
    ],
)
def test_placement_table(
    needs: list[Need], slots: list[tuple[str, ...]], expected: list[int]
) -> None:
    assert place(needs, slots) == expected


def test_placement_refuses_what_no_slot_can_take() -> None:
    with pytest.raises(PlacementError, match="worker 1 \\(trainer\\) needs a host labelled gpu"):
        place([Need("trainer", labels=("gpu",))] * 2, [("gpu",), ()])
    with pytest.raises(PlacementError, match="2 worker slots but the recipe has 3 workers"):
        place([Need("trainer")] * 3, [(), ()])


# ------------------------------------------------------------------ gossip family


def test_drain_expectations_table() -> None:
    sent = {0: {1: 4, 2: 9}, 1: {0: 5, 2: 1}, 2: {0: 6, 1: 3}}
    assert drain_expectations(sent, [0, 1, 2]) == {
        0: {"1": 5, "2": 6},
        1: {"0": 4, "2": 3},
        2: {"0": 9, "1": 1},
    }
    assert drain_expectations(sent, [0, 1]) == {0: {"1": 5}, 1: {"0": 4}}  # 2 failed
    decision = GossipController().on_drain({0: {"sent": {"1": 2, "x": 9, "2": -1}}, 1: {}})
    assert decision.directives == {0: {"expect_from": {"1": 0}}, 1: {"expect_from": {"0": 2}}}


def test_spread_handins_keeps_the_alphas_summing_to_one() -> None:
    w = {"fc.weight": np.array([1.0, 3.0], np.float32), "optim.0.momentum_buffer": np.ones(2)}
    v = {"fc.weight": np.array([3.0, 5.0], np.float32), "optim.0.momentum_buffer": np.ones(2)}
    out = spread_handins({0: HandIn(w, {"alpha": 0.1}), 2: HandIn(v, {"alpha": 0.3})}, 4)
    alphas = {i: h.meta["alpha"] for i, h in sorted(out.items())}
    assert alphas == pytest.approx({0: 0.125, 1: 0.25, 2: 0.375, 3: 0.25})
    assert sum(alphas.values()) == pytest.approx(1.0)
    # the missing workers start from the alpha-weighted average of the model (no optimiser)
    assert out[1].weights.keys() == {"fc.weight"} and out[1].meta["from_average"]
    np.testing.assert_allclose(out[1].weights["fc.weight"], [2.5, 4.5])
    with pytest.raises(HandInError, match="no valid 'alpha'"):
        spread_handins({0: HandIn(w, {})}, 2)


# ------------------------------------------------------------------ the training clock


def test_clock_with_barriers_leaves_evaluation_out() -> None:
    # start at 10 s; epoch 1: worker 1 finishes its steps at 13 (arrives 14, evaluated 1 s);
    # the barrier releases at 14.2. Epoch 2: worker 0 is last, steps done at 17.2.
    reports = [
        Report(0, 1, 12.0, 0.5, 0.80),
        Report(1, 1, 14.0, 1.0, 0.70),
        Report(0, 2, 17.7, 0.5, 0.90),
        Report(1, 2, 16.0, 1.0, 0.92),
    ]
    curve = attempt_curve(10.0, reports, {1: 14.2, 2: 17.8})
    assert [(p.epoch, round(p.train_s, 6), p.accuracy) for p in curve] == [
        (1, 3.0, 0.75),
        (2, 6.0, 0.91),
    ]
    assert curve[1].wall_s == pytest.approx(7.7)


def test_clock_without_barriers_uses_each_workers_own_time() -> None:
    reports = [
        Report(0, 1, 2.0, 0.5, 0.5),
        Report(1, 1, 4.0, 1.0, 0.6),
        Report(0, 2, 4.0, 0.5, 0.7),
        Report(1, 2, 8.0, 1.0, 0.8),
    ]
    curve = attempt_curve(0.0, reports, None)
    assert [round(p.train_s, 6) for p in curve] == [3.0, 6.0]  # worker 1: 4-1, 8-2


def test_a_resumed_attempt_continues_the_clock() -> None:
    first = [Point(1, 2.0, 2.5, 0.5, 2), Point(2, 4.0, 5.0, 0.6, 2), Point(3, 6.0, 7.0, 0.7, 2)]
    second = [Point(3, 1.5, 2.0, 0.72, 2), Point(4, 3.0, 4.0, 0.8, 2)]
    joined = join_attempts([(0, first), (2, second)])
    assert [(p.epoch, p.train_s) for p in joined] == [(1, 2.0), (2, 4.0), (3, 5.5), (4, 7.0)]
    assert time_to(joined, 0.75) == joined[3] and time_to(joined, 0.99) is None


def test_speedups_against_the_first_run() -> None:
    rows = [{"time_to_target_s": 10.0}, {"time_to_target_s": 4.0}, {"time_to_target_s": None}]
    assert speedups(rows, 0.9) == [1.0, 2.5, None]
    assert speedups([{"train_s": 6.0}, {"train_s": 12.0}], None) == [1.0, 0.5]


def test_link_classes() -> None:
    sites = {"w0": "a", "w1": "a", "w2": "b", "w3": None}
    assert [link_class("a", d, sites) for d in ("w1", "w2", "w3", "coordinator")] == [
        "lan",
        "wan",
        "peer",
        "control",
    ]


def test_locations_read_like_the_toml() -> None:
    assert locate(()) == "the top level"
    assert locate(("workers", 1, "slowdown")) == "[[workers]] #2 slowdown"
    assert locate(("model", "options", "hidden")) == "[model] options.hidden"
    assert locate(("sites", 0, "hosts", 1, "cpu")) == "[[sites]] #1 hosts #2 cpu"
    assert locate(("train",), "table") == "[train]"
    assert locate(("workers",), "array") == "[[workers]]"
