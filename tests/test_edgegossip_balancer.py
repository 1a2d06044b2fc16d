"""EdgeGossip's balancer (Algorithm 1 with the specification's fixes) on literal tables and
brute force, and the controller that applies it at start and at every epoch barrier."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgetrain.comm.control import Role
from edgetrain.gossip.config import EdgeGossipSection
from edgetrain.gossip.edgegossip.side import EdgeGossipController
from edgetrain.plan.balancer import balance, halt_reason

FOUR = {0: 2000, 1: 2000, 2: 2000, 3: 2000}


def test_the_specifications_worked_example() -> None:
    # gossip.md A.4: p = (400, 300, 200, 100) samples/s, 2,000 samples each
    b = balance({0: 400.0, 1: 300.0, 2: 200.0, 3: 100.0}, FOUR)
    assert b.ratios == pytest.approx({0: 1.0, 1: 0.75, 2: 0.5, 3: 0.25})
    assert b.times == pytest.approx({0: 5.0, 1: 2000 / 300, 2: 10.0, 3: 20.0})
    assert b.epoch_time == pytest.approx(5.0)
    assert sum(b.ratios[i] * FOUR[i] for i in FOUR) == pytest.approx(5000)  # 62.5% of 8,000
    assert not b.halted and b.failed == () and not b.redistributed


def test_smaller_shards_keep_larger_ratios() -> None:
    # T = (4, 6, 4.5): the fastest to finish (worker 0) sets T_(1)
    b = balance({0: 100.0, 1: 100.0, 2: 200.0}, {0: 400, 1: 600, 2: 900})
    assert b.ratios == pytest.approx({0: 1.0, 1: 4 / 6, 2: 4 / 4.5})


@pytest.mark.parametrize(
    ("p", "f_threshold", "halted", "failed", "ratios"),
    [
        # one failure in four (25%): at the threshold the run goes on, the failed gets r = 0
        ({0: 400.0, 1: 300.0, 2: 200.0, 3: 0.0005}, 0.25, False, (3,), (1.0, 0.75, 0.5, 0.0)),
        # the paper's example threshold, 10%, halts on a single failure among four
        ({0: 400.0, 1: 300.0, 2: 200.0, 3: 0.0005}, 0.10, True, (3,), (0.0, 0.0, 0.0, 0.0)),
        # two failures (50%) are above 25%
        ({0: 400.0, 1: 300.0, 2: 0.0, 3: 0.0}, 0.25, True, (2, 3), (0.0, 0.0, 0.0, 0.0)),
        # a worker that reported nothing (lost), or nonsense, has failed too
        ({0: 400.0, 1: 300.0, 2: float("nan")}, 0.5, False, (2, 3), (1.0, 0.75, 0.0, 0.0)),
        # exactly p_threshold is not a failure
        ({0: 0.001, 1: 0.001, 2: 0.001, 3: 0.001}, 0.0, False, (), (1.0, 1.0, 1.0, 1.0)),
    ],
)
def test_failures_below_and_above_the_threshold(
    p: dict[int, float],
    f_threshold: float,
    halted: bool,
    failed: tuple[int, ...],
    ratios: tuple[float, ...],
) -> None:
    b = balance(p, FOUR, p_threshold=0.001, f_threshold=f_threshold)
    assert b.halted is halted and b.failed == failed
    assert b.failed_fraction == len(failed) / 4
    assert [b.ratios[i] for i in range(4)] == pytest.approx(list(ratios))
    assert all(math.isinf(b.times[i]) for i in failed)


def test_redistribute_spreads_the_failed_share_by_throughput() -> None:
    b = balance({0: 400.0, 1: 300.0, 2: 0.0, 3: 0.0}, FOUR, 0.001, 0.25, "redistribute")
    assert not b.halted and b.redistributed and b.failed == (2, 3)
    # survivors r = (1, 0.75), then 4,000 samples spread 4:3 -> +2285.7 and +1714.3
    assert b.ratios == pytest.approx({0: 1 + 4000 * 4 / 7 / 2000, 1: 0.75 + 4000 * 3 / 7 / 2000,
                                      2: 0.0, 3: 0.0})  # fmt: skip
    # the survivors still finish together
    assert b.ratios[0] * 2000 / 400 == pytest.approx(b.ratios[1] * 2000 / 300)
    # with nothing left to spread over, it halts whatever on_failure says
    assert balance({0: 0.0, 1: 0.0}, {0: 5, 1: 5}, 0.001, 0.25, "redistribute").halted


def test_workers_without_data_do_not_set_the_pace() -> None:
    b = balance({0: 100.0, 1: 50.0, 2: 1.0}, {0: 1000, 1: 1000, 2: 0})
    assert b.ratios == pytest.approx({0: 1.0, 1: 0.5, 2: 1.0})
    assert balance({}, {}).ratios == {}


def test_brute_force_invariants() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        e = int(rng.integers(1, 9))
        sizes = {i: int(rng.integers(1, 5000)) for i in range(e)}
        p = {i: float(rng.choice([0.0, rng.uniform(1, 1000)], p=[0.15, 0.85])) for i in range(e)}
        f_thr = float(rng.uniform(0, 1))
        b = balance(p, sizes, 0.001, f_thr)
        failed = [i for i in range(e) if p[i] < 0.001]
        assert list(b.failed) == failed
        assert b.halted == (len(failed) / e > f_thr)
        if b.halted:
            assert set(b.ratios.values()) == {0.0}
            continue
        ok = [i for i in range(e) if i not in failed]
        assert max(b.ratios[i] for i in ok) == pytest.approx(1.0)  # the fastest keeps all
        assert all(b.ratios[i] == 0.0 for i in failed)
        finish = {i: b.ratios[i] * sizes[i] / p[i] for i in ok}
        assert all(t == pytest.approx(b.epoch_time) for t in finish.values())
        assert all(0 < b.ratios[i] <= 1.0 for i in ok)


def test_halt_reason_names_the_workers() -> None:
    b = balance({0: 400.0, 1: 0.0, 2: 0.0, 3: 100.0}, FOUR, 0.001, 0.25)
    text = halt_reason(b, {1: "worker 1 (host cpu-a)", 2: "worker 2 (host cpu-b)"}, 0.001, 0.25)
    assert text.startswith("EdgeGossip balancer: 2 of 4 workers failed")
    assert "worker 1 (host cpu-a), worker 2 (host cpu-b); 50% > f_threshold 0.25" in text
    assert "\n" not in text


def _controller(epochs: int = 5, **cfg: object) -> EdgeGossipController:
    roles = [Role("trainer", i) for i in range(4)]
    return EdgeGossipController(EdgeGossipSection(**cfg), roles, 0.25, epochs)  # type: ignore[arg-type]


def _ready(p: list[float]) -> dict[int, dict[str, object]]:
    return {i: {"samples": 2000, "host": f"h{i}", "p_next": v} for i, v in enumerate(p)}


def test_controller_balances_at_start_and_each_barrier() -> None:
    c = _controller()
    start = c.on_start(_ready([400, 300, 200, 100]))
    assert start.halt is None
    assert [start.directive(i)["ratio"] for i in range(4)] == pytest.approx([1, 0.75, 0.5, 0.25])
    reports = {i: {"p_next": 100.0, "p_obs": 10.0 * (i + 1)} for i in range(4)}
    go = c.on_barrier(1, reports)
    assert [go.directive(i)["ratio"] for i in range(4)] == pytest.approx([1, 1, 1, 1])
    assert c.decisions[-1]["epoch"] == 2
    # the last barrier decides nothing: no epoch follows it
    assert c.on_barrier(5, reports).directives == {} and c.on_barrier(5, reports).halt is None


def test_reactive_balances_on_measured_throughput() -> None:
    c = _controller(balance="reactive")
    c.on_start(_ready([100, 100, 100, 100]))
    go = c.on_barrier(1, {i: {"p_next": 100.0, "p_obs": 10.0 * (i + 1)} for i in range(4)})
    assert [go.directive(i)["ratio"] for i in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1])


def test_off_gives_everyone_everything() -> None:
    c = _controller(balance="off")
    d = c.on_start(_ready([400, 300, 200, 0]))
    assert d.halt is None and [d.directive(i)["ratio"] for i in range(4)] == [1.0] * 4


def test_lost_or_silent_workers_count_as_failed() -> None:
    c = _controller()
    c.on_start(_ready([400, 300, 200, 100]))
    # worker 3 is gone (not in the reports), worker 2 reports garbage: 2 of 4 > 25%
    d = c.on_barrier(2, {0: {"p_next": 400.0}, 1: {"p_next": 300.0}, 2: {"p_next": "fast"}})
    assert d.halt is not None
    assert "worker 2 (host h2), worker 3 (host h3)" in d.halt
    one_lost = c.on_barrier(3, {0: {"p_next": 400.0}, 1: {"p_next": 300.0}, 2: {"p_next": 200.0}})
    assert one_lost.halt is None and one_lost.directive(2)["ratio"] == pytest.approx(0.5)
    assert one_lost.directive(0)["failed"] == [3]


def test_controller_redistributes_when_told() -> None:
    c = _controller(on_failure="redistribute", p_threshold=50.0)
    d = c.on_start(_ready([400, 300, 20, 10]))
    assert d.halt is None
    assert d.directive(0)["ratio"] == pytest.approx(1 + 4000 * 4 / 7 / 2000)
    assert d.directive(3)["ratio"] == 0.0 and d.directive(3)["redistributed"] is True


def test_drain_accounting_is_gosgds() -> None:
    c = _controller()
    d = c.on_drain({0: {"sent": {"1": 3}}, 1: {"sent": {"0": 2}}})
    assert d.directive(0) == {"expect_from": {"1": 2}}
    assert d.directive(1) == {"expect_from": {"0": 3}}
