"""A stage's waits on a neighbour's pause (a snapshot) come out of its clock: the ledger's
attribution against a literal table, and what it refuses from the network."""

from __future__ import annotations

import math

import pytest

from edgetrain.pipeline.paused import PauseLedger


def test_a_wait_is_attributed_up_to_the_senders_new_pause() -> None:
    led = PauseLedger()
    # (sender's paused_s on the message, this stage's wait for it) -> attributed
    table = [
        (0.0, 0.010, 0.0),  # no pause yet: the wait is the pipeline's own
        (0.150, 0.140, 0.140),  # a 150 ms snapshot, waited 140 ms: all of the wait
        (0.150, 0.020, 0.0),  # no new pause
        (0.250, 0.300, 0.100),  # a 100 ms pause, waited 300 ms: 100 of it
        (0.300, 0.0, 0.0),  # a pause it did not wait for
    ]
    total = 0.0
    for paused, waited, want in table:
        got = led.attribute("w0", paused, waited)
        assert got == pytest.approx(want)
        total += want
    assert led.held_s == pytest.approx(total)
    assert led.seen == {"w0": 0.300}


def test_senders_are_kept_apart() -> None:
    led = PauseLedger()
    assert led.attribute("w0", 0.1, 0.05) == pytest.approx(0.05)
    assert led.attribute("w2", 0.1, 0.2) == pytest.approx(0.1)  # w2's first pause
    assert led.attribute("w0", 0.1, 0.2) == 0.0


@pytest.mark.parametrize("bad", [None, "0.5", True, math.nan, math.inf, -1.0, [0.1]])
def test_what_the_network_sends_is_not_trusted(bad: object) -> None:
    led = PauseLedger()
    led.attribute("w0", 0.5, 0.0)
    assert led.attribute("w0", bad, 1.0) == 0.0
    assert led.held_s == 0.0 and led.seen == {"w0": 0.5}
