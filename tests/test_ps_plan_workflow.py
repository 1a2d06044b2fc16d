"""profile -> plan -> launch, on a real run (issue 28): the planned workflow is never slower
than no plan.

The fault: a plan file whose DynaComm cuts are one segment made the trainers see one transfer
size; the link fit called dt 0 and the epoch barrier re-planned to layer-by-layer cuts, 2.3-2.9x
slower than the run without a plan file, and the report called the prediction wrong by +205%.
Here both runs of the README's workflow (the dynacomm recipe, two trainers, a 2 ms emulated
round trip, two epochs so the barrier re-plans) go side by side: the planned one keeps the
link it measured at start while its fit cannot tell dt from bandwidth, says so, and its second
epoch is not layer by layer and not much slower than the unplanned run's. The plan file holds two
bandwidths and the recipe declares none: each trainer measures its link and says which entry
it took."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.launching import Launch

RECIPE = """
[run]
name = "dynacomm"
seed = 0
[data]
dataset = "digits"
[model]
name = "lenet5"
[train]
family = "ps"
technique = "dynacomm"
epochs = 2
batch_size = 32
lr = 0.05
momentum = 0.9
[ps]
hold_ms = 2
replan = "epoch"
{plan}
[[workers]]
role = "server"
count = 1
[[workers]]
count = 2
"""


def _launch(tmp_path: Path, name: str, plan: str, *extra: str) -> list[dict[str, Any]]:
    """Run the recipe to the end; its trainers' epoch events."""
    recipe = tmp_path / f"{name}.toml"
    recipe.write_text(RECIPE.format(plan=plan))
    launch = Launch(None, tmp_path / "runs", str(recipe), *extra)
    try:
        code, summary = launch.finish(timeout=120)
    finally:
        launch.kill()
    assert code == 0, launch.stderr
    assert summary is not None and summary["status"] == "completed"
    return [r for r in launch.rows if r.get("event") == "epoch" and "iteration_s" in r]


def _median(rows: list[dict[str, Any]], epoch: int) -> float:
    return float(statistics.median(r["iteration_s"] for r in rows if r["epoch"] == epoch))


@pytest.mark.timeout(240)
def test_the_planned_workflow_is_never_slower_than_no_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "RUN"
    code, _, err = run_cli(
        capsys, "profile", "-m", "lenet5", "-i", "1x8x8", "-b", "32", "--run-dir", str(run),
        "--host-name", "h", "--repeats", "3", "--warmup", "1", "--min-time", "0",
    )  # fmt: skip
    assert code == 0, err
    # a 200 ms round trip makes every DynaComm plan one segment per direction (even where the
    # profile caught a stall of a busy machine): the fault's case
    code, _, err = run_cli(
        capsys, "plan", "--profile", str(run / "profiles" / "h.json"),
        "--bandwidth", "1mbit,1gbit", "--rtt", "200ms", "--name", "two", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads((run / "plans" / "two.json").read_text())
    one = doc["bandwidths"][1]["strategies"]["dynacomm"]
    assert one["forward_cuts"] == one["backward_cuts"] == []

    planned = _launch(tmp_path, "planned", 'plan = "plans/two.json"', "--run-dir", str(run))
    unplanned = _launch(tmp_path, "unplanned", "")

    for r in (r for r in planned if r["epoch"] == 2):
        # the fault's cuts were 2,3,4 or 1,2,3,4 (four or five segments of 2 ms apiece); the
        # last two layers compute for 0.1 ms, too little to hide a segment behind
        assert len(r["forward_cuts"]) <= 2 and len(r["backward_cuts"]) <= 2, r["plans"]
        # the prediction stands beside the measurement (the fault's report said +205% to
        # +236%); bounds this wide because other work on a two-core machine can double an
        # epoch's iterations, cuts unchanged
        assert r["prediction_error"] is not None and r["prediction_error"] < 2.0
    assert _median(planned, 2) <= 2.0 * _median(unplanned, 2) + 0.010, (planned, unplanned)
    for r in (r for r in planned if r["epoch"] == 1):
        start, barrier = r["plans"][0], r["plans"][-1]
        # the entry nearest the link each trainer measured (loopback: far above 1 Mbit/s), said
        assert start["source"] == "plan file" and start["plan_bandwidth_Bps"] == 125e6
        assert start["plan_choice"].startswith(
            "plan file plans/two.json: using its 1 Gbit/s (125 MB/s) entry of 2"
        )
        assert "measured by this trainer at start" in start["plan_choice"]
        # the probe's two sizes (the smallest layer, the whole model) identify the link
        assert start["trusted_link"] == "start probe"
        # one segment: one transfer size, so the barrier planned with the probe's link
        assert r["forward_cuts"] == r["backward_cuts"] == []
        assert barrier["source"] == "epoch barrier" and barrier["link_source"] == "start probe"
        assert "one transfer size seen" in barrier["link_note"]
        assert barrier["dt_s"] > 0.001  # not the one-size fit's 0 (the hold alone is 2 ms)
    report = (run / "report" / "summary.md").read_text()
    assert "using its 1 Gbit/s (125 MB/s) entry of 2" in report
    assert "| start probe |" in report  # the link column
