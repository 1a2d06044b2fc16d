"""The link fit of pipelined bursts (edgetrain.ps.burst_fit, .arrivals, .latency)."""

from __future__ import annotations

import numpy as np
import pytest

from edgetrain.ps.arrivals import Transmission, link_samples
from edgetrain.ps.burst_fit import bursts, fit_bursts
from edgetrain.ps.latency import read_link, split_round_trip
from edgetrain.ps.livecosts import fit_line, fit_link

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


def _link(sent: list[float], held: list[float], sizes: list[int]) -> list[Transmission]:
    """What the transmitter logs of one direction over a link at BW with round trip RTT and DT a
    transmission: request ``i`` sent at ``sent[i]`` is let go ``held[i]`` after it reached its
    shard; its answer's bytes queue behind the ones before them on the link."""
    rows: list[Transmission] = []
    free = end = float("-inf")
    for s, h, b in zip(sent, held, sizes, strict=True):
        first_byte = s + RTT + h  # half the round trip there, half back
        arrived = max(first_byte, free) + DT + b / BW
        free = arrived
        lead, end = s >= end, max(end, arrived)  # answers applied in request order
        rows.append(Transmission("pull", 0, len(rows) + 1, b, s, end, h, s, lead, arrived))
    return rows


def _logged(rows: list[Transmission]) -> list[tuple[int, float, bool]]:
    """The per-transmission times the fit once read: applied in request order, a follower from
    the end of the one before it, the whole hold taken out."""
    out, end = [], 0.0
    for r in rows:
        applied = max(r.arrived, end)
        start = r.sent if r.lead else max(r.sent, end)
        out.append((r.nbytes, applied - start - r.held_s, r.lead))
        end = applied
    return out


def test_pulls_let_go_last_layer_first_are_read_from_their_arrivals() -> None:
    # BSP: every pull sent at once, each let go when the slowest trainer's push of its layer
    # came, the last layer 1 ms before the one before it; the first layer, which leads, last
    rows: list[Transmission] = []
    for it in range(6):
        t0 = it * 0.5
        holds = [0.005 + 0.001 * (len(SQUEEZE) - 1 - j) for j in range(len(SQUEEZE))]
        rows += _link([t0] * len(SQUEEZE), holds, SQUEEZE)
    assert [r.lead for r in rows[:3]] == [True, False, False]
    old = [(b, max(0.0, s)) for b, s, lead in _logged(rows) if not lead]
    once = fit_link(old)
    assert once is not None and once.bandwidth > 20 * BW  # the link looked free
    split = read_link(rows)
    assert split.fit is not None
    assert split.fit.bandwidth == pytest.approx(BW, rel=0.05)
    assert split.fit.dt == pytest.approx(DT, abs=1e-4)


def test_pushes_sent_as_gradients_come_pay_no_round_trip_each() -> None:
    # pushes sent 3 ms apart (the backward pass), several within one round trip: a follower
    # sent after the one before it had gone out waits its own round trip, not the link
    rows: list[Transmission] = []
    for it in range(6):
        t0 = it * 0.5
        sizes = SQUEEZE[::-1]
        rows += _link([t0 + 0.003 * j for j in range(len(sizes))], [0.0] * len(sizes), sizes)
    split = read_link(rows)
    assert split.fit is not None
    assert split.fit.bandwidth == pytest.approx(BW, rel=0.1)
    assert split.rtt == pytest.approx(RTT, rel=0.2)
    samples = link_samples(rows, RTT)
    assert [s for _, s, first in samples if not first] == pytest.approx(
        [DT + b / BW for b, _, first in samples if not first], abs=1e-9
    )


def test_a_line_over_many_samples_compares_drawn_pairs_the_same_way_each_time() -> None:
    x = np.array([float(b) for b in SQUEEZE * 40])
    y = DT + x / BW + np.tile(np.linspace(-1e-4, 1e-4, len(SQUEEZE)), 40)
    full = fit_line(x, y)
    drawn = fit_line(x, y, max_pairs=5_000)
    assert drawn == fit_line(x, y, max_pairs=5_000)  # a fixed seed
    assert drawn.bandwidth == pytest.approx(full.bandwidth, rel=0.02)
    assert fit_line(x[:20], y[:20], max_pairs=5_000) == fit_line(x[:20], y[:20])  # few: all
