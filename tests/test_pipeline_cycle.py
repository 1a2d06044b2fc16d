"""The closed cycle of a pipeline's microbatches (:mod:`edgetrain.pipeline.cycle`): literal
tables worked by hand, the bounds it keeps, and the exponential case against brute force (the
product-form solution summed over every placement of the microbatches)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from edgetrain.pipeline.cycle import Station, period

# stage 0 30 ms, its link 12.8 ms, stage 1 36 ms
THREE = [Station(0.030), Station(0.0128), Station(0.036)]


def test_literal_tables_worked_by_hand() -> None:
    # n = 1: R = (30, 12.8, 36), X = 1 / 78.8 ms, Q = U = (0.3807, 0.1624, 0.4569)
    # n = 2: R_k = S_k (1 + Q_k - U_k / 2) = (35.711, 13.839, 44.224) ms, sum 93.774, X = 2 / that
    assert period(THREE, 1) == pytest.approx(0.0788)
    assert period(THREE, 2) == pytest.approx(0.093774 / 2, abs=1e-6)
    # n = 3: R = (43.252, 14.831, 56.136) ms, sum 114.219
    assert period(THREE, 3) == pytest.approx(0.114219 / 3, abs=1e-6)
    # exponential times (c2 = 1) wait for every one ahead: n = 2, R_k = S_k (1 + Q_k)
    r = [0.030 * 1.3807, 0.0128 * 1.1624, 0.036 * 1.4569]
    assert period(THREE, 2, c2=1.0) == pytest.approx(sum(r) / 2, rel=1e-4)


def test_bounds_one_in_flight_and_many() -> None:
    delay = Station(0.010, queue=False)
    # one microbatch in flight: its round trip, latency included
    assert period([*THREE, delay], 1) == pytest.approx(0.0888)
    # never faster than the slowest station, nor than the round trip over the microbatches
    for n in range(1, 12):
        p = period([*THREE, delay], n)
        assert p >= 0.036 - 1e-12 and p >= 0.0888 / n - 1e-12
    # many in flight: the slowest station sets the pace, the latency hidden
    assert period([*THREE, delay], 40) == pytest.approx(0.036)
    # more in flight never slows the cycle
    got = [period(THREE, n) for n in range(1, 10)]
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(got))
    # one station: its service, however many wait
    assert period([Station(0.02)], 5) == pytest.approx(0.02)


def _brute_period(services: list[float], delays: list[float], n: int) -> float:
    """Exponential services: the product form's normalising constants summed over every
    placement of ``n`` microbatches, X(n) = G(n - 1) / G(n)."""
    k = len(services) + len(delays)

    def g(total: int) -> float:
        out = 0.0
        for place in itertools.product(range(total + 1), repeat=k):
            if sum(place) != total:
                continue
            term = 1.0
            for i, s in enumerate(services):
                term *= s ** place[i]
            for j, d in enumerate(delays):
                c = place[len(services) + j]
                term *= d**c / math.factorial(c)
            out += term
        return out

    return g(n) / g(n - 1)


def test_exponential_services_match_the_product_form() -> None:
    rng = random.Random(7)
    for _ in range(20):
        services = [rng.uniform(0.001, 0.05) for _ in range(rng.randint(1, 3))]
        delays = [rng.uniform(0.0, 0.03) for _ in range(rng.randint(0, 1))]
        stations = [Station(s) for s in services] + [Station(d, queue=False) for d in delays]
        for n in range(1, 5):
            exact = _brute_period(services, delays, n)
            # the mean-value analysis is exact for exponential services (c2 = 1)
            assert period(stations, n, c2=1.0) == pytest.approx(exact, rel=1e-9)


def test_bad_cycles_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one microbatch"):
        period(THREE, 0)
    with pytest.raises(ValueError, match="at least one station"):
        period([], 2)
    with pytest.raises(ValueError, match=">= 0 seconds"):
        Station(-0.01)
    with pytest.raises(ValueError, match=">= 0 seconds"):
        Station(math.nan)
    with pytest.raises(ValueError, match="coefficient"):
        period(THREE, 2, c2=-1.0)
