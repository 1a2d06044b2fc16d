"""The link fit of pipelined bursts (edgetrain.ps.burst_fit) and a transmission's link time."""

from __future__ import annotations

import pytest

from edgetrain.ps.burst_fit import bursts, fit_bursts
from edgetrain.ps.latency import split_round_trip
from edgetrain.ps.livecosts import fit_link
from edgetrain.ps.transmitter import Transmission

# squeezenet1_1's 26 layers on 10 classes, bytes (the DynaComm reproduction's model)
SQUEEZE = [2560, 4160, 4352, 37120, 8256, 4352, 37120, 16512, 16896, 147968, 32896, 16896, 147968]
SQUEEZE += [49344, 37632, 332544, 73920, 37632, 332544, 98560, 66560, 590848, 131328, 66560]
SQUEEZE += [590848, 20520]
BW, DT, RTT = 36e6, 2e-4, 0.010  # 300 Mbit/s less headers, 0.2 ms a transmission, 10 ms


def _iteration(frozen: tuple[tuple[int, int], ...] = ()) -> list[tuple[int, float, bool]]:
    """One layer-by-layer burst; each ``(first, n)`` in ``frozen``: the trainer froze while
    ``n`` answers came, applied them all at once after it (the first logged with all their
    time, the others at 10 us)."""
    rows = [[b, (RTT if i == 0 else 0.0) + DT + b / BW, i == 0] for i, b in enumerate(SQUEEZE)]
    for first, n in frozen:
        rows[first][1] = sum(float(r[1]) for r in rows[first : first + n])
        for r in rows[first + 1 : first + n]:
            r[1] = 1e-5
    return [(int(b), float(s), bool(lead)) for b, s, lead in rows]


def test_bursts_are_the_followers_after_each_leader() -> None:
    samples = [(5, 0.1, False), (1, 0.5, True), (2, 0.2, False), (3, 0.3, False)]
    samples += [(4, 0.4, True), (6, 0.6, True), (7, -0.1, False)]
    assert bursts(samples) == [[(2, 0.2), (3, 0.3)], [(7, 0.0)]]
    assert fit_bursts([(1, 0.5, True), (4, 0.4, True)]) is None
    one = fit_bursts([(1, 0.5, True), (4_000, 0.002, False)])  # one follower: through the origin
    assert one is not None and one.dt == 0.0 and one.bandwidth == pytest.approx(2e6)


def test_exact_bursts_give_the_link_back() -> None:
    fit = fit_bursts(_iteration() * 6)
    assert fit is not None
    assert fit.dt == pytest.approx(DT, rel=0.01) and fit.bandwidth == pytest.approx(BW, rel=0.01)
    assert fit.samples == 25 * 6


def test_freezes_that_bunch_answers_do_not_make_the_link_look_free() -> None:
    # the reproduction's layer-by-layer pushes: over half the answers applied in bunches
    frozen = _iteration(((2, 5), (9, 6), (18, 7))) * 6
    single = fit_link([(b, s) for b, s, lead in frozen if not lead])
    assert single is not None and single.bandwidth > 20 * BW  # what the planner used to get
    fit = fit_bursts(frozen)
    assert fit is not None
    assert fit.bandwidth == pytest.approx(BW, rel=0.15)
    assert fit.dt == pytest.approx(DT, abs=2e-4)
    split = split_round_trip(frozen)  # the round trip is read against the burst line
    assert split.fit == fit and split.rtt == pytest.approx(RTT, rel=0.1)


def test_a_followers_link_time_leaves_out_only_the_hold_after_its_start() -> None:
    # every pull of an iteration sent at 0 and held 30 ms for the version: the follower's
    # stretch (from the one before it, at 41 ms) is all the link's
    held = Transmission("pull", 3, 2, 332_544, 0.041, 0.050, 0.030, 0.0, False)
    assert held.link_s == pytest.approx(0.009)  # (seconds - held_s once read -0.021)
    lead = Transmission("pull", 3, 1, 2_560, 0.0, 0.041, 0.030, 0.0, True)
    assert lead.link_s == pytest.approx(0.011)
    late = Transmission("pull", 3, 5, 98_560, 0.060, 0.070, 0.065, 0.001, False)
    assert late.link_s == pytest.approx(0.004)  # let go at 66 ms, after its stretch began
