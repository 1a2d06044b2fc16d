"""Deferred evaluation (``[train] eval_deferred``): epoch-end snapshots of the model, scored after
training, put back on their epochs by the report; the epoch loop takes them instead of
evaluating, and only a family whose workers can refuses nothing."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError
from torch import nn

from edgetrain.comm.control import HandIn
from edgetrain.recipe import Recipe
from edgetrain.report import summary
from edgetrain.report.clock import Report
from edgetrain.report.scalars import epoch_scalars
from edgetrain.rundir import read_jsonl
from edgetrain.runtime import snapshots
from edgetrain.runtime.epochs import run_epochs
from edgetrain.runtime.snapshots import Snapshots
from tests.helpers.launching import completed
from tests.helpers.procs import edgetrain_processes


def _model(value: float) -> nn.Linear:
    net = nn.Linear(2, 1)
    with torch.no_grad():
        net.weight.fill_(value)
        net.bias.fill_(0.0)
    return net


def _set(net: nn.Linear, value: float) -> None:
    with torch.no_grad():
        net.weight.fill_(value)


def test_snapshots_are_scored_in_order_and_the_model_is_put_back() -> None:
    net = _model(1.0)
    seen: list[float] = []

    def evaluate() -> tuple[float, float]:
        w = float(net.weight.detach().sum())
        seen.append(w)
        return w / 10, -w

    snaps = Snapshots(net, evaluate)
    snaps.take(1)
    _set(net, 2.0)
    snaps.take(3)
    _set(net, 5.0)  # the model at the end of training
    assert snaps.score() == [[1, 0.2, -2.0], [3, 0.4, -4.0]]
    assert float(net.weight.detach().sum()) == 10.0  # put back
    assert snaps.held == [] and snaps.score() == []
    assert seen == [2.0, 4.0]


def test_a_snapshot_is_a_copy_not_a_view() -> None:
    net = _model(1.0)
    snaps = Snapshots(net, lambda: (float(net.weight.detach().sum()), 0.0))
    snaps.take(1)
    _set(net, 7.0)
    assert snaps.score() == [[1, 2.0, 0.0]]


class _Session:
    """What run_epochs asks of a session: no coordinator, every epoch's metrics kept."""

    start_directive: Mapping[str, Any] = {}

    def __init__(self) -> None:
        self.ended: list[dict[str, Any]] = []

    def poll(self) -> None:
        return None

    def progress(self, *args: Any, **kwargs: Any) -> None:
        return None

    def checkpoint_due(self, epoch: int) -> bool:
        return False

    def end_epoch(self, epoch: int, steps: int, metrics: dict[str, Any], *rest: Any, **kw: Any):
        self.ended.append({"epoch": epoch, **metrics})
        return None


class _Work:
    """A model whose weight is the number of steps taken; its accuracy is weight / 100."""

    def __init__(self) -> None:
        self.net = _model(0.0)
        self.evaluated = 0

    def batches(self, epoch: int) -> list[int]:
        return [1, 1]

    def step(self, epoch: int, batch: int) -> float:
        with torch.no_grad():
            self.net.weight.add_(batch / 2)  # two weights: +1 in sum a step
        return 0.5

    def evaluate(self) -> tuple[float, float]:
        self.evaluated += 1
        return float(self.net.weight.detach().sum()) / 100, 0.1

    def metrics(self) -> dict[str, Any]:
        return {}

    def checkpoint(self) -> HandIn:
        raise AssertionError("no checkpoint is due")

    def apply(self, directive: Mapping[str, Any]) -> None:
        return None

    def serve(self) -> list[Any]:
        return []


def test_the_epoch_loop_snapshots_and_scores_them_after_the_last_epoch() -> None:
    work, session = _Work(), _Session()
    snaps = Snapshots(work.net, work.evaluate)
    steps = run_epochs(session, work, epochs=4, eval_every=2, snapshots=snaps)  # type: ignore[arg-type]
    assert steps == 8
    rows = {r["epoch"]: r for r in session.ended}
    assert "test_accuracy" not in rows[1] and "test_accuracy" not in rows[2]
    assert snapshots.DEFERRED not in rows[2]
    assert rows[4]["test_accuracy"] == 0.08  # evaluated live: the end of training
    assert rows[4][snapshots.DEFERRED] == [[2, 0.04, 0.1]]  # epoch 2's snapshot, after
    assert work.evaluated == 2
    assert float(work.net.weight.detach().sum()) == 8.0


def test_without_snapshots_every_evaluation_epoch_evaluates() -> None:
    work, session = _Work(), _Session()
    run_epochs(session, work, epochs=4, eval_every=2)  # type: ignore[arg-type]
    rows = {r["epoch"]: r for r in session.ended}
    assert rows[2]["test_accuracy"] == 0.04 and rows[4]["test_accuracy"] == 0.08
    assert all(snapshots.DEFERRED not in r for r in rows.values())


def test_the_report_puts_each_workers_scores_back_on_its_epochs() -> None:
    reports = [
        Report(0, 1, 11.0),
        Report(1, 1, 11.5),
        Report(0, 2, 12.0, 0.3, 0.9, 0.2, 0.25),
        Report(1, 2, 12.5, 0.3, 0.8, 0.2, 0.35),
    ]
    rows = {
        0: {"r": [{"event": "epoch", "epoch": 2, "deferred_eval": [[1, 0.6, 1.1]]}]},
        1: {"r": [{"event": "epoch", "epoch": 2, "deferred_eval": [[1, 0.5, 1.3], "bad"]}]},
    }
    out = summary.deferred_scores(reports, rows, "r")
    assert [(r.worker, r.epoch, r.accuracy, r.test_loss) for r in out] == [
        (0, 1, 0.6, 1.1),
        (1, 1, 0.5, 1.3),
        (0, 2, 0.9, 0.25),
        (1, 2, 0.8, 0.35),
    ]
    assert summary.deferred_scores(reports, rows, "another attempt") == reports
    assert summary.DEFERRED == snapshots.DEFERRED


def _recipe(family: str, technique: str) -> dict[str, Any]:
    return {
        "run": {"name": "x"},
        "data": {"dataset": "digits"},
        "model": {"name": "lenet5"},
        "train": {"family": family, "technique": technique, "eval_deferred": True},
        "workers": [{"count": 2}],
    }


def test_only_a_family_that_can_defer_takes_eval_deferred() -> None:
    assert Recipe.model_validate(_recipe("gossip", "dlion")).train.eval_deferred
    with pytest.raises(ValidationError, match="the ps family evaluates as it trains"):
        Recipe.model_validate(_recipe("ps", "dynacomm"))


RECIPE = """
[run]
name = "{technique}-deferred"
seed = 2
checkpoint_every = 0
[data]
dataset = "digits"
[model]
name = "lenet5"
[train]
technique = "{technique}"
epochs = 3
batch_size = 16
lr = 0.02
eval_deferred = true
{section}
[[workers]]
count = 2
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("technique", "section"), [("gosgd", ""), ("dlion", "[dlion]\npilot_s = 0.5")]
)
def test_a_deferred_run_reports_accuracy_at_every_epoch(
    tmp_path: Path, technique: str, section: str
) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(technique=technique, section=section))
    launch, summ = completed(recipe, tmp_path / "runs", timeout=200)
    run = Path(summ["run"])
    assert edgetrain_processes(launch.manifest()["run_id"]) == {}
    for w in (0, 1):
        rows = [
            r for r in read_jsonl(run / "metrics" / f"worker-{w}.jsonl") if r["event"] == "epoch"
        ]
        assert [("test_accuracy" in r) for r in rows] == [False, False, True]
        assert [e for e, _, _ in rows[-1]["deferred_eval"]] == [1, 2]
    curve = summ["curve"]
    assert [p["epoch"] for p in curve] == [1, 2, 3]
    assert all(isinstance(p["test_accuracy"], float) for p in curve)
    assert curve[-1]["test_accuracy"] > 0.5  # it trained


def test_the_export_puts_each_snapshots_scores_at_its_epoch() -> None:
    row = {
        "event": "epoch",
        "worker": 1,
        "epoch": 3,
        "test_accuracy": 0.9,
        "deferred_eval": [[1, 0.5, 1.5], [2, 0.7, None], "bad"],
    }
    got = {(s.tag, s.step): s.value for s in epoch_scalars(row)}
    assert got == {
        ("worker-1/test_accuracy", 3): 0.9,
        ("worker-1/test_accuracy", 1): 0.5,
        ("worker-1/test_loss", 1): 1.5,
        ("worker-1/test_accuracy", 2): 0.7,
    }
