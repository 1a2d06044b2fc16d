"""The exchange worker's CPU, part by part (edgetrain/gossip/exchange/cpu_parts.py): each part
gets the time spent in it and not in a part inside it, against a clock the test moves."""

from __future__ import annotations

import pytest

from edgetrain.gossip.exchange.cpu_parts import CpuParts
from edgetrain.gossip.exchange.worker_report import cpu_ms_by_part, exchange_report


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_nested_parts_charge_the_innermost() -> None:
    clock = Clock()
    cpu = CpuParts(clock)
    with cpu.part("step"):
        clock.now += 1.0  # step's own
        with cpu.part("wait"):
            clock.now += 2.0
            with cpu.part("receive"):  # a receive inside the wait is the receive's
                clock.now += 4.0
            clock.now += 8.0
        with cpu.part("update"):
            clock.now += 16.0
        clock.now += 32.0
    clock.now += 64.0  # outside every part: nobody's
    assert cpu.as_dict() == {"receive": 4.0, "step": 33.0, "update": 16.0, "wait": 10.0}
    assert sum(cpu.as_dict().values()) == 63.0


def test_parts_accumulate_and_survive_an_exception() -> None:
    clock = Clock()
    cpu = CpuParts(clock)
    for _ in range(3):
        with cpu.part("send"):
            clock.now += 0.5
    with pytest.raises(RuntimeError), cpu.part("step"), cpu.part("receive"):
        clock.now += 1.0
        raise RuntimeError("a bad message")
    with cpu.part("step"):
        clock.now += 2.0
    assert cpu.as_dict() == {"receive": 1.0, "send": 1.5, "step": 2.0}


def test_a_clock_going_back_charges_nothing() -> None:
    clock = Clock()
    cpu = CpuParts(clock)
    clock.now = 5.0
    with cpu.part("step"):
        clock.now = 4.0
    assert cpu.as_dict() == {"step": 0.0}


def test_the_report_gives_ms_per_iteration_and_the_other_threads() -> None:
    parts = {"gradient": 1.0, "receive": 0.2, "update": 0.1}
    assert cpu_ms_by_part(parts, 1.5, 100) == pytest.approx(
        {"gradient": 10.0, "receive": 2.0, "update": 1.0, "threads": 2.0}
    )
    # the process's CPU is sampled apart: a sum a hair above it reads as no other threads
    assert cpu_ms_by_part(parts, 1.25, 100)["threads"] == 0.0
    assert cpu_ms_by_part(None, 1.5, 100) is None  # a worker of an older version
    assert cpu_ms_by_part(parts, None, 100) is None
    assert cpu_ms_by_part(parts, 1.5, 0) is None
    assert cpu_ms_by_part({"gradient": "x", "send": True}, 1.0, 10) == {"threads": 100.0}


def test_the_exchange_report_shows_the_parts() -> None:
    row = {
        "event": "epoch", "iterations": 10, "cpu_s": 0.2, "wait_s": 0.0, "epoch_s": 1.0,
        "cpu_parts": {"gradient": 0.1, "send": 0.02, "receive": 0.03},
    }  # fmt: skip
    rep = exchange_report({"technique": "dlion"}, {0: [row], 1: [{**row, "cpu_parts": None}]})
    assert rep is not None
    assert rep["workers"][0]["cpu_ms_by_part"] == pytest.approx(
        {"gradient": 10.0, "receive": 3.0, "send": 2.0, "threads": 5.0}
    )
    assert rep["workers"][1]["cpu_ms_by_part"] is None
    md = rep["markdown"]
    assert "| worker | gradient | send | receive | threads | total |" in md
    assert "| 0 | 10.00 | 2.00 | 3.00 | 5.00 | 20.00 |" in md
    assert "| 1 |" not in md.split("CPU per iteration")[1]
