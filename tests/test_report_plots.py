"""The report's plots and curve (issue 30), against literal tables: each worker's epochs on the
training clock, the loss in the curve, what the accuracy and loss plots draw (the pipeline's
snapshots included), and legends that tell runs apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edgetrain.report.clock import (
    Point,
    Report,
    WorkerPoint,
    attempt_curve,
    join_worker_points,
    worker_points,
)
from edgetrain.report.compare import legend_labels, run_row
from edgetrain.report.figures import Series, accuracy_series, loss_series, snapshot_times
from edgetrain.report.plot import plot_series
from edgetrain.report.summary import family_accuracy, training_curve, worker_curves

# start at 10 s; epoch 1: worker 1 finishes its steps at 13 (arrives 14, evaluated 1 s), the
# barrier releases at 14.2; epoch 2: worker 0 is last, steps done at 17.2
BARRIERS = [
    Report(0, 1, 12.0, 0.5, 0.80, 1.0, 0.70),
    Report(1, 1, 14.0, 1.0, 0.70, 1.2, 0.90),
    Report(0, 2, 17.7, 0.5, 0.90, 0.5, 0.40),
    Report(1, 2, 16.0, 1.0, 0.92, None, None),
]
RELEASES = {1: 14.2, 2: 17.8}


def _rounded(points: list[WorkerPoint]) -> list[tuple[int, int, float]]:
    return [(p.worker, p.epoch, round(p.train_s, 6)) for p in points]


def test_each_workers_epochs_on_the_training_clock_with_barriers() -> None:
    # worker 1's epoch 2 ends 0.8 s after the release of epoch 1 (16 - 1 - 14.2)
    assert _rounded(worker_points(10.0, BARRIERS, RELEASES)) == [
        (0, 1, 1.5),
        (1, 1, 3.0),
        (0, 2, 6.0),
        (1, 2, 3.8),
    ]


def test_each_workers_epochs_on_its_own_clock_without_barriers() -> None:
    reports = [
        Report(0, 1, 2.0, 0.5),
        Report(1, 1, 4.0, 1.0),
        Report(0, 2, 4.0, 0.5),
        Report(1, 2, 8.0, 1.0),
    ]
    assert _rounded(worker_points(0.0, reports, None)) == [
        (0, 1, 1.5),
        (1, 1, 3.0),
        (0, 2, 3.0),
        (1, 2, 6.0),
    ]


def test_the_curve_carries_the_mean_losses_of_the_workers_that_report_one() -> None:
    curve = attempt_curve(10.0, BARRIERS, RELEASES)
    assert [(p.epoch, round(p.train_s, 6), p.loss, p.test_loss) for p in curve] == [
        (1, 3.0, pytest.approx(1.1), pytest.approx(0.8)),
        (2, 6.0, 0.5, 0.4),  # worker 1 reported no loss: left out, not counted as 0
    ]
    assert curve[1].as_dict() == {
        "epoch": 2,
        "train_s": 6.0,
        "wall_s": 7.7,
        "test_accuracy": 0.91,
        "workers": 2,
        "loss": 0.5,
        "test_loss": 0.4,
    }


def test_a_resumed_attempt_continues_each_workers_clock() -> None:
    first = worker_points(10.0, BARRIERS, RELEASES)
    second = [WorkerPoint(0, 2, 1.0), WorkerPoint(1, 2, 2.0)]
    joined = join_worker_points([(0, first), (1, second)])
    assert _rounded(joined) == [(0, 1, 1.5), (1, 1, 3.0), (0, 2, 4.0), (1, 2, 5.0)]


def _epoch(t: float, epoch: int, eval_s: float, acc: float, loss: float | None) -> dict[str, Any]:
    return {"event": "epoch", "epoch": epoch, "t": t, "eval_s": eval_s, "test_accuracy": acc,
            "loss": loss, "test_loss": None}  # fmt: skip


COORDINATOR = [
    {"event": "started", "t": 10.0, "barriers": True, "run_id": "a"},
    {"event": "barrier", "epoch": 1, "t": 14.2},
    {"event": "barrier", "epoch": 2, "t": 17.8},
]
WORKERS = {
    0: [
        {"event": "registered", "t": 1.0, "run_id": "a"},
        _epoch(12.0, 1, 0.5, 0.8, 1.0),
        _epoch(17.7, 2, 0.5, 0.9, 0.5),
    ],
    1: [
        {"event": "registered", "t": 1.0, "run_id": "a"},
        _epoch(14.0, 1, 1.0, 0.7, 1.2),
        _epoch(16.0, 2, 1.0, 0.92, None),
    ],
}


def test_the_run_and_its_workers_from_metrics_rows() -> None:
    curve = training_curve(COORDINATOR, WORKERS)
    assert [(p.epoch, round(p.train_s, 6), p.loss) for p in curve] == [
        (1, 3.0, pytest.approx(1.1)),
        (2, 6.0, 0.5),
    ]
    curves = worker_curves(COORDINATOR, WORKERS)
    assert {
        w: [(p.epoch, round(p.train_s, 6), p.loss) for p in ps] for w, ps in curves.items()
    } == {
        0: [(1, 1.5, 1.0), (2, 6.0, 0.5)],
        1: [(1, 3.0, 1.2), (2, 3.8, None)],
    }


def test_the_pipeline_fills_in_the_snapshots_test_loss() -> None:
    own = {"epoch_accuracy": {"1": 0.7}, "epoch_test_loss": {"1": 0.9}}
    curve = family_accuracy([Point(1, 2.0, 2.5, None, 1), Point(2, 4.0, 5.0, None, 1)], own)
    assert [(p.accuracy, p.test_loss) for p in curve] == [(0.7, 0.9), (None, None)]


GOSSIP = {
    "name": "t",
    "train_s": 6.0,
    "test_accuracy": 0.93,
    "test_loss": 0.2,
    "averaged_test_accuracy": 0.93,
    "workers": [
        {"id": 0, "role": "trainer", "role_index": 0, "slowdown": 1.0},
        {"id": 1, "role": "trainer", "role_index": 1, "slowdown": 2.0},
    ],
    "curve": [{"epoch": 1, "train_s": 3.0, "test_loss": 0.7}, {"epoch": 2, "train_s": 6.0,
              "test_loss": 0.4}],
}  # fmt: skip
GOSSIP_POINTS = {
    0: [WorkerPoint(0, 1, 1.5, 0.8, 1.0), WorkerPoint(0, 2, 6.0, 0.9, 0.5)],
    1: [WorkerPoint(1, 1, 3.0, 0.7, 1.2), WorkerPoint(1, 2, 3.8, 0.92, None)],
}


def test_the_accuracy_plot_of_workers_and_their_averaged_model() -> None:
    assert accuracy_series(GOSSIP, GOSSIP_POINTS) == [
        Series("worker 0", (1.5, 6.0), (0.8, 0.9)),
        Series("worker 1 (slow x2)", (3.0, 3.8), (0.7, 0.92)),
        Series("averaged model", (6.0,), (0.93,), "star"),
    ]


def test_the_loss_plot_of_workers_and_their_averaged_model() -> None:
    assert loss_series(GOSSIP, GOSSIP_POINTS) == [
        Series("worker 0: training loss", (1.5, 6.0), (1.0, 0.5)),
        Series("worker 1 (slow x2): training loss", (3.0,), (1.2,)),
        Series("test loss (mean over workers)", (3.0, 6.0), (0.7, 0.4), "dashed"),
        Series("averaged model: test loss", (6.0,), (0.2,), "star"),
    ]


SNAPSHOTS = [
    {"snap": 45, "epoch": 1, "train_s": 0.15, "epoch_end": False, "test_accuracy": 0.5,
     "test_loss": 1.5},
    {"snap": 89, "epoch": 1, "train_s": 0.3, "epoch_end": True, "test_accuracy": 0.6,
     "test_loss": 1.2},
    {"snap": 178, "epoch": 2, "train_s": 0.6, "epoch_end": True, "test_accuracy": 0.8,
     "test_loss": 0.6},
]  # fmt: skip
PIPELINE = {
    "name": "p",
    "train_s": 1.0,
    "test_accuracy": 0.8,
    "test_loss": 0.6,
    "averaged_test_accuracy": None,
    "workers": [
        {"id": 0, "role": "stage", "role_index": 0, "slowdown": 1.0},
        {"id": 1, "role": "stage", "role_index": 1, "slowdown": 1.0},
        {"id": 2, "role": "evaluator", "role_index": 0, "slowdown": 1.0},
    ],
    "curve": [{"epoch": 1, "train_s": 0.8, "test_accuracy": 0.6, "test_loss": 1.2},
              {"epoch": 2, "train_s": 1.0, "test_accuracy": 0.8, "test_loss": 0.6}],
    "technique_report": {"snapshots": SNAPSHOTS},
}  # fmt: skip
PIPELINE_POINTS = {
    0: [WorkerPoint(0, 1, 0.8), WorkerPoint(0, 2, 1.0)],  # stage 0 computes no loss
    1: [WorkerPoint(1, 1, 0.8, None, 1.4), WorkerPoint(1, 2, 1.0, None, 0.9)],
}


@pytest.mark.parametrize(
    ("snaps", "curve", "want"),
    [
        # epoch-end snapshots sit on the run's curve; one within epoch 1 in proportion
        (SNAPSHOTS, PIPELINE["curve"], [0.4, 0.8, 1.0]),
        # past the last epoch-end snapshot: shifted with it
        ([SNAPSHOTS[1], {"epoch": 2, "train_s": 0.5}], PIPELINE["curve"], [0.8, 1.0]),
        # no epoch-end snapshot to anchor on: the stages' own clock
        ([SNAPSHOTS[0]], PIPELINE["curve"], [0.15]),
        ([{"epoch": 1, "train_s": None, "epoch_end": True}], [], [None]),
    ],
)
def test_snapshots_on_the_runs_training_clock(
    snaps: list[dict[str, Any]], curve: list[dict[str, Any]], want: list[float | None]
) -> None:
    assert snapshot_times(snaps, curve) == pytest.approx(want)


def test_the_pipeline_plots_its_snapshot_curve_and_the_last_stages_loss() -> None:
    acc = accuracy_series(PIPELINE, PIPELINE_POINTS)
    assert [(s.label, s.kind, s.ys) for s in acc] == [
        ("snapshots (scored after the run)", "line", (0.5, 0.6, 0.8)),
        ("final model", "star", (0.8,)),
    ]
    assert acc[0].xs == pytest.approx((0.4, 0.8, 1.0))
    loss = loss_series(PIPELINE, PIPELINE_POINTS)
    assert [(s.label, s.kind, s.ys) for s in loss] == [
        ("worker 1 stage 1: training loss", "line", (1.4, 0.9)),
        ("snapshots: test loss", "dashed", (1.5, 1.2, 0.6)),
        ("final model: test loss", "star", (0.6,)),
    ]


def test_plot_series_writes_a_png_or_nothing(tmp_path: Path) -> None:
    path = tmp_path / "loss.png"
    assert plot_series([], path, "t", "loss") is None and not path.exists()
    assert plot_series(loss_series(GOSSIP, GOSSIP_POINTS), path, "t", "loss") == str(path)
    assert path.read_bytes()[:4] == b"\x89PNG"


def _row(run: str, name: str, seed: int, run_id: str, technique: str = "gosgd") -> dict[str, Any]:
    family = "gossip" if technique == "gosgd" else "ps"
    summary = {"run": run, "name": name, "seed": seed, "run_id": run_id, "family": family,
               "technique": technique, "curve": []}  # fmt: skip
    return run_row(summary, None)


def test_compare_legends_tell_runs_apart() -> None:
    rows = [
        _row("runs/quickstart-20261126-111559", "quickstart", 0, "aaaa1111bbbb2222"),
        _row("runs/quickstart-20261126-111812", "quickstart", 0, "cccc3333dddd4444"),
        _row("runs/p", "quickstart", 1, "eeee5555ffff6666"),
        _row("a/x", "x", 0, "1111222233334444", "dynacomm"),
        _row("b/x", "x", 0, "5555666677778888", "dynacomm"),
    ]
    assert legend_labels(rows) == [
        "quickstart-20261126-111559: gossip/gosgd, seed 0",
        "quickstart-20261126-111812: gossip/gosgd, seed 0",
        "quickstart (p): gossip/gosgd, seed 1",
        "x: ps/dynacomm, seed 0 [11112222]",
        "x: ps/dynacomm, seed 0 [55556666]",
    ]
