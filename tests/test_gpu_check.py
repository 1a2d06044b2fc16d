"""scripts/gpu_check.py's pure parts: the overlap ceiling and the cut, the calibration's
choice of batch, the PASS/FAIL aggregation and its table, the determinism verdict from runs'
hashes, the --set spelling, bad arguments, and the one-line skip where there is no CUDA (no
run is launched here)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_overlap_ceiling_is_min_over_sum(gc: ModuleType) -> None:
    assert gc.overlap_ceiling(4.0, 6.0) == pytest.approx(0.4)
    assert gc.overlap_ceiling(6.0, 4.0) == pytest.approx(0.4)
    assert gc.overlap_ceiling(5.0, 5.0) == pytest.approx(0.5)  # the most overlap can save
    assert gc.overlap_ceiling(1.0, 0.0) == 0.0
    assert gc.overlap_ceiling(0.0, 0.0) == 0.0
    with pytest.raises(ValueError):
        gc.overlap_ceiling(-1.0, 2.0)
    # a sequential iteration of 10 that computes for 4: communication is the other 6
    assert gc.ceiling_within(4.0, 10.0) == pytest.approx(0.4)
    assert gc.ceiling_within(12.0, 10.0) == 0.0  # compute timed longer than the iteration


def test_cut_and_its_share_of_the_ceiling(gc: ModuleType) -> None:
    assert gc.cut(10.0, 8.0) == pytest.approx(0.2)
    assert gc.cut(10.0, 11.0) == pytest.approx(-0.1)  # slower: a negative cut
    with pytest.raises(ValueError):
        gc.cut(0.0, 1.0)
    assert gc.share_of_ceiling(0.2, 0.4) == pytest.approx(0.5)
    assert gc.share_of_ceiling(0.2, 0.0) is None


def _row(c_only: float, both: float, m_only: float, costs: Any = None) -> dict[str, Any]:
    buckets = {"compute_only": c_only, "both": both, "comm_only": m_only, "neither": 0.1}
    return {"buckets": buckets, "costs": costs}


def test_sequential_parts_from_buckets_else_the_cost_model(gc: ModuleType) -> None:
    rows = [_row(4.0, 0.0, 6.0), _row(6.0, 1.0, 9.0), _row(5.0, 0.0, 7.0)]
    assert gc.parts_from_rows(rows) == (5.0, 7.0, "measured buckets")  # medians
    costs = {"compute_s": 2.0, "communication_s": 3.0}
    rows = [{"buckets": {}, "costs": costs}, {"costs": costs}]
    assert gc.parts_from_rows(rows) == (2.0, 3.0, "live cost model")
    assert gc.parts_from_rows([{"buckets": {}}]) is None
    assert gc.parts_from_rows([]) is None


def test_pick_batch_is_the_first_whose_compute_meets_communication(gc: ModuleType) -> None:
    times = {128: 0.007, 32: 0.001, 64: 0.003}
    assert gc.pick_batch(times, 0.005) == 128
    assert gc.pick_batch(times, 0.003) == 64
    assert gc.pick_batch(times, 0.5) == 128  # none reaches it: the largest timed
    with pytest.raises(ValueError):
        gc.pick_batch({}, 0.1)
    # samples for 12 batches per epoch once a fifth is held out for the test split
    assert gc.ps_sample_count(32, 12) == 480
    assert gc.ps_sample_count(100, 1) == 125


def _result(gc: ModuleType, name: str, status: str, secs: float = 1.0) -> Any:
    return gc.CheckResult(name, status, f"{name} figures", elapsed_s=secs)


def test_any_fail_fails_the_check_and_the_table_says_each(gc: ModuleType) -> None:
    passed = [_result(gc, "training", "PASS"), _result(gc, "memory", "PASS")]
    assert gc.exit_code(passed) == 0
    assert gc.exit_code([*passed, _result(gc, "ps", "SKIP")]) == 0  # not run fails nothing
    mixed = [_result(gc, "ps", "FAIL", 80.0), *passed, _result(gc, "determinism", "SKIP", 0.0)]
    assert gc.exit_code(mixed) == 1
    text = gc.table(mixed, 123.4)
    lines = text.splitlines()
    assert lines[0].split() == ["check", "result", "time", "figures"]
    # in the checks' order, whatever order they finished in
    assert [ln.split()[0] for ln in lines[1:5]] == ["1", "2", "3", "4"]
    assert "FAIL" in lines[4] and "80.0 s" in lines[4] and "ps figures" in lines[4]
    assert lines[2].split()[-1] == "figures" and " - " in lines[2]  # no time of its own
    assert lines[-1] == "total 123.4 s: 2 PASS, 1 FAIL, 1 not run"
    assert gc.exit_code([]) == 0


def _run(gc: ModuleType, label: str, sha: str | None, completed: bool = True) -> Any:
    return gc.Run(label, Path("/nowhere") / label, completed, 1.0, {"model_sha256": sha})


def test_determinism_verdict_from_the_runs_hashes(gc: ModuleType) -> None:
    training = {"pipedream": _run(gc, "pd", "a" * 64), "mcpipe": _run(gc, "mc", "a" * 64)}
    ps = {k: _run(gc, k, "b" * 64) for k in gc.PS_ORDER}
    result = gc.check_determinism(training, ps)
    assert result.status == "PASS"
    assert result.figures["claims"] == {
        "mcpipe = pipedream": True, "dynacomm twice": True, "four schedules": True
    }  # fmt: skip
    # one schedule's second run differs: the schedules' claim fails, DynaComm's holds
    ps["lbl-1"] = _run(gc, "lbl-1", "c" * 64)
    result = gc.check_determinism(training, ps)
    assert result.status == "FAIL" and result.headline == "differ: four schedules"
    # a run that did not complete has no hash to agree with
    training["mcpipe"] = _run(gc, "mc", "a" * 64, completed=False)
    assert not gc.check_determinism(training, None).figures["claims"]["mcpipe = pipedream"]
    assert gc.check_determinism(None, None).status == "SKIP"
    assert gc.all_equal(["x", "x"]) and not gc.all_equal([]) and not gc.all_equal(["x", None])


def test_set_values_are_toml(gc: ModuleType) -> None:
    for value in (True, False, 3, 0.0, 2.5, "cuda", [2048, 2048], [1, 32, 32]):
        assert tomllib.loads(f"k = {gc.toml_value(value)}")["k"] == value
    with pytest.raises(TypeError):
        gc.toml_value({"a": 1})


def test_bad_arguments_are_one_line_and_exit_2(
    gc: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["--only", "training,speed"], ["--timeout", "0"], ["--device", "tpu"]):
        with pytest.raises(SystemExit) as exc:
            gc.parse_args(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith("gpu-check: ")
    args = gc.parse_args(["--only", "memory,ps", "--device", "cpu"])
    assert args.only == ["memory", "ps"] and args.device == "cpu" and args.out == "gpu-check.json"


def test_without_cuda_one_line_and_exit_0(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # torch then sees no CUDA device
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", "x.json"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout == "gpu-check: no CUDA device here: skipped\n"
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing launched


def test_untimed_checks_launch_in_parallel_on_a_cuda_machine_only(gc: ModuleType) -> None:
    assert gc.default_parallel("cuda", 16) == 4
    assert gc.default_parallel("cuda", 64) == 4
    assert gc.default_parallel("cuda", 6) == 1
    assert gc.default_parallel("cuda", None) == 1
    assert gc.default_parallel("cpu", 16) == 1
