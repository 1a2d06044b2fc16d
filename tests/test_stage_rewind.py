"""A lost pipeline stage or data-parallel replica comes back (issue 31, item 2): the rules of a
rewind (pure, literal tables), and real runs where a stage's (or a replica's) process is killed
or suspended, restarted by its launcher, and every training process goes back to the last
checkpoint with it: the run completes with the undisturbed run's model and snapshots, bit for
bit (mcPipe's are PipeDream's: one undisturbed PipeDream run serves both)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from edgetrain.comm.rewind import can_rewind, gen_of, rewind_epoch
from edgetrain.report.clock import Report
from edgetrain.report.summary import kept_reports, rewinds_of
from tests.helpers.launching import Launch, completed
from tests.helpers.rejoining import fault_and_rejoin, gated_env, metric_rows

# ------------------------------------------------------------------ the rules (pure)


@pytest.mark.parametrize(
    ("survivors", "halted", "lost", "joining", "ok"),
    [
        ([0, 2], {0, 2}, [], {1: True}, True),
        ([0, 2], {0}, [], {1: True}, False),  # stage 2 still trains
        ([0, 2], {0, 2}, [], {1: False}, False),  # stage 1's new process sets up
        ([0, 2], {0, 2}, [1], {}, False),  # stage 1 not back yet
        ([0], {0}, [2], {1: True}, False),  # one back, one still lost
        ([0, 2], {0, 2}, [], {}, False),  # nobody to take back
        ([], set(), [], {0: True}, True),  # Local: the only stage, back
    ],
)
def test_a_rewind_waits_for_every_survivor_and_every_lost_stage(
    survivors: list[int], halted: set[int], lost: list[int], joining: dict[int, bool], ok: bool
) -> None:
    assert can_rewind(survivors, halted, lost, joining) is ok


def test_the_rewind_goes_to_the_common_checkpoint_or_the_start() -> None:
    assert rewind_epoch([3, 3, None], 0) == 3
    assert rewind_epoch([None, None], 0) == 0  # no checkpoint yet: the seeded start
    assert rewind_epoch([None], 5) == 5  # a resumed run: where it resumed
    with pytest.raises(ValueError, match="disagree"):
        rewind_epoch([2, 3], 0)


def test_generations_read_from_messages() -> None:
    assert gen_of({"gen": 2}) == 2
    assert gen_of({}) == 0
    for bad in (True, -1, "2", 1.0):
        assert gen_of({"gen": bad}) == 0


def test_epoch_reports_a_rewind_threw_away_leave_the_curve() -> None:
    reports = [
        Report(0, 1, 10.0),
        Report(0, 2, 20.0),
        Report(0, 3, 28.0),  # trained again after the rewind at t=30 to epoch 1
        Report(0, 2, 45.0),
        Report(0, 3, 55.0),
    ]
    kept = kept_reports(reports, [(30.0, 1)])
    assert [(r.epoch, r.t) for r in kept] == [(1, 10.0), (2, 45.0), (3, 55.0)]
    rows = [{"event": "rewound", "t": 30.0, "epoch": 1}, {"event": "barrier", "epoch": 1}]
    assert rewinds_of(rows) == [(30.0, 1)]


# ------------------------------------------------------------------ real runs

RECIPE = """
[run]
name = "{name}"
seed = 4
heartbeat_s = 0.5
checkpoint_every = 1
restart = {restart}
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "pipeline"
technique = "{technique}"
epochs = 4
batch_size = 16
lr = 0.05
momentum = 0.9
[pipeline]
snapshot_every = 40
[[workers]]
role = "stage"
count = 3
[[workers]]
role = "evaluator"
count = 1
"""


def _snaps(summary: dict[str, Any]) -> list[tuple[int, str | None]]:
    return [(s["snap"], s["sha256"]) for s in summary["technique_report"]["snapshots"]]


@pytest.fixture(scope="module")
def calm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The undisturbed PipeDream run's summary (mcPipe trains its weights, bit for bit)."""
    tmp = tmp_path_factory.mktemp("calm")
    recipe = tmp / "calm.toml"
    recipe.write_text(RECIPE.format(name="calm", restart=0, technique="pipedream"))
    _, summary = completed(recipe, tmp / "runs")
    assert all(sha is not None for _, sha in _snaps(summary))
    return summary


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("technique", "fault"), [("pipedream", signal.SIGKILL), ("mcpipe", signal.SIGSTOP)]
)
def test_a_lost_stage_is_restarted_and_the_run_rewinds_to_its_checkpoint(
    tmp_path: Path, technique: str, fault: int, calm: dict[str, Any]
) -> None:
    recipe = tmp_path / "lost.toml"
    recipe.write_text(RECIPE.format(name="lost", restart=1, technique=technique))
    env, gate = gated_env(tmp_path)
    launch = Launch(recipe, tmp_path / "runs", env=env)
    got = fault_and_rejoin(launch, gate, 1, fault, ready=[0, 1, 2], first_epoch=False)
    got.assert_completed()
    assert got.summary is not None
    manifest = launch.manifest()
    rewinds = manifest["rewinds"]
    assert len(rewinds) == 1 and rewinds[0]["back"] == [1] and rewinds[0]["workers"] == [0, 2]
    assert rewinds[0]["epoch"] >= 1  # the checkpoint after epoch 1 at least
    for w in (0, 2):  # the survivors went back once
        final = [r for r in metric_rows(launch.run_dir, w) if r["event"] == "final"]
        assert final[-1]["rewinds"] == 1
    # every epoch once on the run's curve
    assert [p["epoch"] for p in got.summary["curve"]] == [1, 2, 3, 4]

    # the same run, undisturbed: the same model and the same snapshots, bit for bit
    assert got.summary["model_sha256"] == calm["model_sha256"]
    assert _snaps(got.summary) == _snaps(calm)


REPLICAS = RECIPE.replace('technique = "{technique}"', 'technique = "dataparallel"').replace(
    'role = "stage"\ncount = 3', 'role = "replica"\ncount = 2'
)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_lost_replica_is_restarted_and_the_replicas_rewind(tmp_path: Path) -> None:
    calm = tmp_path / "calm.toml"
    calm.write_text(REPLICAS.format(name="calm", restart=0))
    _, undisturbed = completed(calm, tmp_path / "calm-runs")
    recipe = tmp_path / "lost.toml"
    recipe.write_text(REPLICAS.format(name="lost", restart=1))
    env, gate = gated_env(tmp_path)
    launch = Launch(recipe, tmp_path / "runs", env=env)
    got = fault_and_rejoin(launch, gate, 0, signal.SIGKILL, ready=[0, 1], first_epoch=False)
    got.assert_completed()
    assert got.summary is not None
    rewinds = launch.manifest()["rewinds"]
    assert len(rewinds) == 1 and rewinds[0]["back"] == [0] and rewinds[0]["workers"] == [1]
    final = [r for r in metric_rows(launch.run_dir, 1) if r["event"] == "final"]
    assert final[-1]["rewinds"] == 1
    assert [p["epoch"] for p in got.summary["curve"]] == [1, 2, 3, 4]
    assert got.summary["model_sha256"] == undisturbed["model_sha256"]
    assert _snaps(got.summary) == _snaps(undisturbed)
