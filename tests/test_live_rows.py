"""The live view's rows (issue 30), against literal tables: a sequence of events in, what each
row shows out, for every role; and the watchdog that keeps start-up a phase, not a warning."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from edgetrain.cli import live_rows
from edgetrain.cli.live import LiveProgress
from edgetrain.cli.live_rows import Cells, Row, apply, apply_run, cells, legend, new_rows
from edgetrain.comm.control import Event, assign_roles
from edgetrain.launch.watchdog import Watchdog, warn_after
from edgetrain.recipe import parse_recipe

Step = tuple[int | None, str, dict[str, Any], float]  # worker (None: the run), kind, data, t


def _rows(*roles: tuple[str, int], slow: tuple[float, ...] = (), epochs: int = 3) -> dict[int, Row]:
    n = len(roles)
    return new_rows(list(roles), ["h"] * n, list(slow) or [1.0] * n, epochs, 16)


def _play(rows: dict[int, Row], steps: list[Step]) -> None:
    for worker, kind, data, t in steps:
        if worker is None:
            apply_run(rows, kind, data, t)
        else:
            apply(rows[worker], kind, data, t)


START: list[Step] = [
    (0, "registered", {"host": "jetson-a"}, 2.0),
    (0, "ready", {"samples": 320, "steps_per_epoch": 20}, 14.0),
]


@pytest.mark.parametrize(
    ("steps", "now", "want"),
    [
        ([], 3.0, Cells("worker 0 h", "", None, 0, "", "starting: launching the process 3 s")),
        (
            START[:1],
            12.4,
            Cells("worker 0 jetson-a", "", None, 0, "", "starting: loading data and model 10 s"),
        ),
        (
            START,
            15.0,
            Cells(
                "worker 0 jetson-a", "", None, 0, "", "starting: loaded, waiting for the others 1 s"
            ),
        ),
        (
            [*START, (None, "started", {}, 16.0)],
            16.0,
            Cells("worker 0 jetson-a", "", 60, 0, "epoch 0/3  loss -  acc -", "training"),
        ),
        (
            # 10 steps in 2 s after the first report: 5 steps/s x 16 samples; 49 steps left
            [
                *START,
                (None, "started", {}, 16.0),
                (0, "progress", {"epoch": 1, "epoch_step": 1, "step": 1, "loss": 2.5}, 16.5),
                (0, "progress", {"epoch": 1, "epoch_step": 11, "step": 11, "loss": 1.25}, 18.5),
            ],
            19.5,
            Cells(
                "worker 0 jetson-a",
                "",
                60,
                11,
                "epoch 1/3  loss 1.250  acc -  80 samples/s  ETA 0:09",
                "training",
            ),
        ),
        (
            [
                *START,
                (None, "started", {}, 16.0),
                (0, "progress", {"epoch": 1, "epoch_step": 1, "step": 1, "loss": 2.5}, 16.5),
                (
                    0,
                    "epoch",
                    {"epoch": 1, "epoch_steps": 20, "loss": 0.9, "test_accuracy": 0.875},
                    20.3,
                ),
                (0, "progress", {"epoch": 2, "epoch_step": 5, "step": 25, "loss": 0.5}, 21.3),
            ],
            21.3,
            Cells(
                "worker 0 jetson-a",
                "",
                60,
                25,
                "epoch 2/3  loss 0.500  acc 0.875  80 samples/s  ETA 0:07",
                "training",
            ),
        ),
        (
            [
                *START,
                (None, "started", {}, 16.0),
                (0, "epoch", {"epoch": 3, "epoch_steps": 20, "steps": 60, "loss": 0.2}, 30.0),
                (0, "done", {}, 30.1),
                (0, "final", {"final_test_accuracy": 0.96}, 31.0),
            ],
            40.0,
            Cells("worker 0 jetson-a", "", 60, 60, "epoch 3/3  loss 0.200  acc 0.960", "done"),
        ),
        (
            [*START, (0, "failed", {"reason": "was killed by\nSIGKILL"}, 17.0)],
            18.0,
            Cells(
                "worker 0 jetson-a",
                "",
                60,
                0,
                "epoch 0/3  loss -  acc -",
                "failed: was killed by SIGKILL",
            ),
        ),
    ],
)
def test_a_trainer_row_from_start_up_to_the_end(steps: list[Step], now: float, want: Cells) -> None:
    rows = _rows(("trainer", 0))
    _play(rows, steps)
    assert cells(rows[0], now) == want


def test_a_parameter_server_shows_what_it_serves() -> None:
    rows = _rows(("server", 0), ("trainer", 0))
    assert cells(rows[0], 0.0).label == "worker 0 server 0 h"
    _play(rows, [(0, "registered", {}, 1.0), (0, "ready", {"tensors": 10}, 5.0)])
    _play(rows, [(None, "started", {}, 6.0)])
    assert cells(rows[0], 6.0) == Cells(
        "worker 0 server 0 h", "", None, 0, "served 0 pushes, answered 0 pulls", "serving"
    )
    _play(rows, [(0, "progress", {"epoch": 0, "step": 40, "pushes": 40, "pulls": 38}, 7.0)])
    assert cells(rows[0], 7.0).detail == "served 40 pushes, answered 38 pulls"
    _play(rows, [(None, "draining", {}, 8.0)])
    assert cells(rows[0], 8.0).status == "handing in"
    _play(rows, [(0, "final", {"pushes": 66, "pulls": 60, "steps": 0}, 8.5)])
    assert cells(rows[0], 9.0) == Cells(
        "worker 0 server 0 h", "", 1, 1, "served 66 pushes, answered 60 pulls", "done"
    )


def test_a_pipeline_evaluator_shows_snapshots_received_then_scored() -> None:
    rows = _rows(("stage", 0), ("stage", 1), ("evaluator", 0))
    _play(rows, [(None, "started", {}, 6.0)])
    assert cells(rows[2], 6.0).detail == "received 0 snapshots"
    assert cells(rows[2], 6.0).status == "collecting snapshots"
    _play(rows, [(2, "progress", {"epoch": 0, "step": 0, "snapshots_received": 2}, 7.0)])
    assert cells(rows[2], 7.0).detail == "received 2 snapshots"
    _play(rows, [(None, "draining", {}, 8.0)])
    assert cells(rows[2], 8.0).status == "scoring snapshots"
    snaps = [
        {"snap": 89, "test_accuracy": 0.91},
        {"snap": 178, "test_accuracy": None},  # incomplete: not scored
        {"snap": 267, "test_accuracy": 0.958},
    ]
    _play(rows, [(2, "final", {"snapshots": snaps, "steps": 0}, 9.0)])
    assert cells(rows[2], 9.0) == Cells(
        "worker 2 evaluator 0 h", "", 1, 1, "scored 2 snapshots, last acc 0.958", "done"
    )


def _bar(c: Cells) -> tuple[int | None, int, str]:
    return c.total, c.completed, c.detail


def test_only_the_last_pipeline_stage_shows_a_loss() -> None:
    rows = _rows(("stage", 0), ("stage", 1), ("evaluator", 0))
    _play(
        rows,
        [
            (0, "ready", {"samples": 1437}, 5.0),
            (1, "ready", {"samples": 1437}, 5.0),
            (None, "started", {}, 6.0),
            # an older stage 0 sent loss 0.0, a number it never computed: not shown
            (0, "progress", {"epoch": 1, "epoch_step": 3, "step": 3, "loss": 0.0}, 6.5),
            (1, "progress", {"epoch": 1, "epoch_step": 3, "step": 3, "loss": 2.25}, 6.5),
        ],
    )
    # steps per epoch estimated from the samples (1437 / 16 -> 90) until an epoch ends
    assert _bar(cells(rows[0], 6.5)) == (270, 3, "epoch 1/3")
    assert cells(rows[1], 6.5).detail == "epoch 1/3  loss 2.250"
    _play(rows, [(0, "epoch", {"epoch": 1, "epoch_steps": 89, "steps": 89, "loss": None}, 7.0)])
    # 86 steps in 0.5 s: 172 steps/s of 16 samples; 178 steps left
    assert _bar(cells(rows[0], 7.0)) == (267, 89, "epoch 1/3  2,752 samples/s  ETA 0:01")


def test_slowdown_is_named_and_explained_once() -> None:
    rows = _rows(("trainer", 0), ("trainer", 1), slow=(1.0, 2.0))
    assert [cells(r, 0.0).slow for r in rows.values()] == ["", "slow x2"]
    assert legend(rows) == live_rows.SLOWDOWN_LEGEND
    assert legend(_rows(("trainer", 0))) is None


@pytest.mark.parametrize(
    ("seconds", "text"), [(4.6, "0:05"), (59.4, "0:59"), (760, "12:40"), (3723, "1:02:03")]
)
def test_clock(seconds: float, text: str) -> None:
    assert live_rows.clock(seconds) == text


def test_a_bar_never_moves_back() -> None:
    rows = _rows(("trainer", 0), epochs=10)
    _play(
        rows,
        [
            (0, "ready", {"steps_per_epoch": 20}, 0.0),
            (None, "started", {}, 0.0),
            # resumed after epoch 5: the step counter restarts at 0, the epoch does not
            (0, "progress", {"epoch": 6, "epoch_step": 3, "step": 3}, 1.0),
            (0, "epoch", {"epoch": 6}, 2.0),
            (0, "progress", {"epoch": 6, "epoch_step": 19, "step": 19}, 3.0),
        ],
    )
    assert rows[0].completed == 6 * 20


# ------------------------------------------------------------------ the watchdog


@pytest.mark.parametrize(
    ("phase", "after"),
    [("registering", 120.0), ("training", 10.0), ("draining", 10.0), ("finished", 10.0)],
)
def test_start_up_waits_much_longer_before_a_warning(phase: str, after: float) -> None:
    assert warn_after(phase, 10.0, 120.0) == after


class _Coordinator:
    def __init__(self, phase: str, waited: float) -> None:
        self.phase, self.waited = phase, waited

    def stall(self, now: float) -> tuple[float, str] | None:
        return self.waited, f"waiting on worker 0 for {self.waited:.0f} s"


@pytest.mark.parametrize(
    ("phase", "waited", "warned"),
    [
        ("registering", 20.0, False),  # a normal start-up on two cores
        ("registering", 125.0, True),
        ("training", 11.0, True),  # a straggler at a barrier
        ("training", 9.0, False),
    ],
)
def test_the_watchdog_warns_of_abnormal_waits_only(phase: str, waited: float, warned: bool) -> None:
    event = Watchdog(10.0, 30.0, 120.0).check(_Coordinator(phase, waited), 1000.0)
    assert (event is not None) == warned
    if event is not None:
        assert event == Event(
            None,
            "waiting",
            {"message": f"waiting on worker 0 for {waited:.0f} s", "waited_s": waited,
             "phase": phase},
            event.at,
        )  # fmt: skip


def test_the_watchdog_repeats_a_warning_every_so_often() -> None:
    dog, coord = Watchdog(10.0, 30.0, 120.0), _Coordinator("training", 15.0)
    assert dog.check(coord, 1000.0) is not None
    assert dog.check(coord, 1020.0) is None
    assert dog.check(coord, 1030.0) is not None


def test_the_live_view_draws_each_role_in_its_words() -> None:
    recipe = parse_recipe(
        {
            "train": {"family": "ps", "technique": "sequential", "epochs": 2},
            "workers": [{"role": "server", "count": 1}, {"count": 2, "slowdown": 2.0}],
        }
    )
    out = io.StringIO()
    console = Console(file=out, width=160, color_system=None)
    live = LiveProgress(recipe, assign_roles(["server", "trainer", "trainer"]), console)
    for worker, kind, data in [
        (None, "started", {}),
        (0, "progress", {"pushes": 12, "pulls": 10}),
        (1, "progress", {"epoch": 1, "epoch_step": 2, "step": 2, "loss": 1.5}),
    ]:
        live.on_event(Event(worker, kind, data), 1.0)
    console.print(live.progress.get_renderable())
    text = out.getvalue()
    assert "worker 0 server 0 localhost" in text and "served 12 pushes, answered 10 pulls" in text
    assert "slow x2" in text and "epoch 1/2  loss 1.500  acc -" in text


def test_the_slowdown_legend_is_printed_as_written() -> None:
    recipe = parse_recipe({"workers": [{"count": 1}, {"count": 1, "slowdown": 4.0}]})
    out = io.StringIO()
    live = LiveProgress(recipe, assign_roles(["trainer", "trainer"]), Console(file=out, width=200))
    with live:
        pass
    assert live_rows.SLOWDOWN_LEGEND in out.getvalue()  # "[[workers]]" is not markup
