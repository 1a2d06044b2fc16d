"""The cost model beside the measurement in a run's report: the pure parts against literal
rows, the setting a report builds from a profile and from a testbed's ``hosts.toml``, and a
real run with a profile in its directory whose report predicts and compares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgetrain.emulate.spec import load_spec
from edgetrain.emulate.topology import build
from edgetrain.launch.hosts import parse_hosts, to_toml
from edgetrain.report.predicted import (
    compare,
    markdown,
    measured_iteration,
    measured_workers,
    run_setting,
)
from edgetrain.runtime.predict import Prediction
from tests.helpers.cli import run_cli
from tests.helpers.launching import Launch
from tests.helpers.paths import REPO

PROFILE = {
    "schema_version": 1, "host": "ref", "created": "2026-11-26T00:00:00Z",
    "device": {"cpu_model": "x", "cores": 2, "memory_bytes": 2**30, "torch_threads": 2,
               "cuda": None},
    "model": "mlp", "input": [1, 8, 8], "batch_sizes": [32],
    "layers": [{"name": "fc", "param_bytes": 4000, "activation_bytes": 1280, "fwd_s": 0.002,
                "bwd_s": 0.004, "fwd_iqr_s": 0.0, "bwd_iqr_s": 0.0}],
    "step_s": 0.007, "throughput": {"32": 4000.0}, "links": [], "peak_memory_bytes": None,
    "compute_source": "measured",
}  # fmt: skip


def _epoch(epoch: int, steps: int, seconds: float) -> dict[str, Any]:
    return {"event": "epoch", "epoch": epoch, "epoch_steps": steps, "epoch_s": seconds}


def test_measured_iteration_drops_the_first_epoch() -> None:
    rows = [_epoch(1, 10, 1.0), _epoch(2, 10, 0.2), _epoch(3, 10, 0.4), {"event": "final"}]
    assert measured_iteration(rows) == pytest.approx(0.03)
    assert measured_iteration([_epoch(1, 10, 0.5)]) == pytest.approx(0.05)
    assert measured_iteration([_epoch(1, 0, 0.5), {"event": "ready"}]) is None


def test_measured_workers_count_the_steps_of_the_worker_that_took_the_most() -> None:
    # EdgeGossip: worker 0 trains its whole shard (10 steps), worker 1 a fifth of it in about
    # the same time; both are measured per step of the whole shard, the first epoch dropped
    workers = {
        0: [_epoch(1, 10, 9.0), _epoch(2, 10, 1.0), _epoch(3, 10, 1.2)],
        1: [_epoch(1, 2, 9.0), _epoch(2, 2, 1.1), _epoch(3, 2, 1.3), {"event": "final"}],
    }
    assert measured_workers(workers) == pytest.approx({0: 0.11, 1: 0.12})
    # where every worker takes as many steps, each its own epoch over its steps
    same = {0: [_epoch(1, 10, 1.0), _epoch(2, 10, 0.2)], 1: [_epoch(1, 10, 0.4)]}
    assert measured_workers(same) == pytest.approx({0: 0.02, 1: 0.04})
    assert measured_workers({0: [{"event": "ready"}]}) == {}


def test_compare_puts_each_workers_prediction_beside_it() -> None:
    p = Prediction("edgegossip", 0.10, {"compute": 0.1}, 0, (), per_worker={0: 0.10, 1: 0.08})
    doc = compare(p, {0: 0.11, 1: 0.12, 2: 0.5})  # worker 2 predicted nothing: left out
    assert doc["measured_s"] == pytest.approx(0.12)  # the slowest of the predicted workers
    assert doc["error"] == pytest.approx(0.2)
    assert doc["worker_errors"] == pytest.approx({"0": 0.1, "1": 0.5})
    text = "\n".join(markdown({**doc, "profile": "ref", "testbed": None}))
    assert "measured 120.00 ms (the slowest worker): +20%" in text
    assert "- worker 1: predicted 80.00 ms busy per iteration, measured 120.00 ms (+50%)" in text


def test_compare_says_a_miss() -> None:
    p = Prediction("gosgd", 0.010, {"compute": 0.008, "overhead": 0.002}, 0, ("why",))
    doc = compare(p, {0: 0.011, 1: 0.012, 2: 0.013})
    assert doc["measured_s"] == pytest.approx(0.012)
    assert doc["error"] == pytest.approx(0.2) and not doc["miss"]
    assert compare(p, {0: 0.014})["miss"]
    text = "\n".join(markdown({**compare(p, {0: 0.014}), "profile": "ref", "testbed": None}))
    assert "predicted 10.00 ms per iteration (compute 8.00 ms, overhead 2.00 ms)" in text
    assert "+40% against the prediction" in text and "missed by more than 30%" in text
    assert markdown({"unavailable": "no profile"}) == ["", "- cost model: no profile"]


def test_the_setting_of_a_local_run_and_of_a_testbed_run(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "ref.json").write_text(json.dumps(PROFILE))
    manifest = {"workers": [{"id": 0, "slowdown": 1.0}, {"id": 1, "slowdown": 4.0}]}
    built = run_setting(tmp_path, manifest, 16)
    assert built is not None
    setting, source = built
    assert source == {"profile": "ref", "testbed": None}
    assert [d.speed for d in setting.devices] == [1.0, 0.25]
    assert setting.layers[0].forward_s == pytest.approx(0.001)  # batch 32 -> 16
    # an emulated testbed's hosts.toml carries its spec: CPU shares over the profile's cores
    spec = load_spec(REPO / "recipes" / "testbeds" / "dlion-4.toml")
    hosts = parse_hosts(
        {
            "hosts": [{"address": f"10.0.0.{i}", "name": h.name} for i, (_, h) in
                      enumerate(spec.hosts, start=2)],
            "testbed": build(spec, "10.231.0.0/24").facts().as_dict(),
        },
        "hosts.toml",
    )  # fmt: skip
    (tmp_path / "hosts.toml").write_text(to_toml(hosts))
    manifest = {"workers": [{"id": i} for i in range(4)]}
    built = run_setting(tmp_path, manifest, 32)
    assert built is not None
    setting, source = built
    assert source["testbed"] == "dlion-4" and source["reference_cpu"] == 2
    assert [d.speed for d in setting.devices] == pytest.approx([0.45, 0.15, 0.15, 0.15])
    assert setting.link(0, 1).bandwidth_Bps == pytest.approx(1e9 / 8)  # the LAN
    assert setting.link(0, 3).bandwidth_Bps == pytest.approx(1e8 / 8)  # the WAN


@pytest.mark.timeout(240)
def test_a_run_with_a_profile_reports_prediction_beside_measurement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "RUN"
    code, _, err = run_cli(
        capsys,
        "profile",
        "-m",
        "mlp",
        "-i",
        "1x8x8",
        "-b",
        "16",
        "--run-dir",
        str(run),
        "--host-name",
        "h",
        "--repeats",
        "3",
        "--warmup",
        "1",
        "--min-time",
        "0",
    )  # fmt: skip  (the quickstart's mlp has the default hidden widths, 128 and 64)
    assert code == 0, err
    recipe = str(REPO / "recipes" / "quickstart.toml")
    launch = Launch(
        None, tmp_path / "runs", recipe, "--run-dir", str(run), "--set", "train.epochs=3"
    )
    try:
        code, summary = launch.finish(timeout=180)
    finally:
        launch.kill()
    assert code == 0, launch.stderr
    doc = json.loads((run / "report" / "summary.json").read_text())
    pred = doc["prediction"]
    assert pred["technique"] == "gosgd" and pred["profile"] == "h"
    assert pred["predicted_s"] > 0 and pred["parts"]["compute"] > 0
    assert set(pred["workers"]) == {"0", "1", "2", "3"}
    assert pred["measured_s"] > 0 and pred["error"] is not None
    assert set(pred["predicted_workers"]) == set(pred["worker_errors"]) == {"0", "1", "2", "3"}
    md = (run / "report" / "summary.md").read_text()
    assert "## Cost model: predicted beside measured" in md
    assert "- worker 3: predicted" in md  # each worker's prediction beside its measurement
