"""scripts/bench_advise.py's pure part: which techniques a setting launches, each setting's
verdict and the two figures (literal rows); an unknown setting refused in one line, nothing
run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_advise.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_advise", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_launched_is_the_top_three_and_each_other_familys_best() -> None:
    bench = _module()
    ranking = [
        {"technique": t, "family": f, "fits": fits}
        for t, f, fits in [
            ("a", "gossip", True), ("x", "ps", False), ("b", "gossip", True),
            ("c", "gossip", True), ("d", "ps", True), ("e", "gossip", True),
            ("f", "pipeline", True), ("g", "pipeline", True),
        ]
    ]  # fmt: skip
    assert bench.launched(ranking) == ["a", "b", "c", "d", "f"]


def _run(t: str, predicted: float, measured: float | None, error: float | None) -> dict:
    return {"technique": t, "predicted_rate": predicted, "measured_rate": measured, "error": error}


def test_judge_and_figures() -> None:
    bench = _module()
    right = bench.judge([_run("a", 100, 95, 0.1), _run("b", 90, 100, -0.2)])
    assert right == {
        "predicted": ["a", "b"], "measured": ["b", "a"], "best_right": True,
        "best_over_measured_best": 0.95,
    }  # fmt: skip
    wrong = bench.judge([_run("a", 100, 80, 0.3), _run("b", 90, 100, 0.05)])
    assert wrong["best_right"] is False
    unmeasured = bench.judge([_run("a", 100, None, None), _run("b", 90, 100, 0.05)])
    assert unmeasured["best_right"] is None
    settings = [
        {"verdict": right, "runs": [_run("a", 1, 1, 0.1), _run("b", 1, 1, -0.2)]},
        {"verdict": wrong, "runs": [_run("a", 1, 1, 0.3), _run("b", 1, 1, 0.05)]},
        {"verdict": unmeasured, "runs": [_run("a", 1, None, None)]},
    ]
    assert bench.figures(settings) == {
        "predicted_best_share": 0.5, "settings_judged": 2,
        "median_iteration_error": 0.15, "runs_measured": 4,
        "median_iteration_error_at_probe_speed": None,
    }  # fmt: skip


def test_seeds_a_median_each_and_every_run_in_the_figure() -> None:
    bench = _module()
    per_seed = [
        {"seed": 1, "measured_s": 0.012, "error": 0.2},
        {"seed": 2, "measured_s": 0.010, "error": 0.0},
        {"seed": 3, "measured_s": 0.011, "error": 0.1},
    ]
    got = bench.over_seeds(per_seed, 0.010)
    assert got["measured_s"] == 0.011
    assert round(got["error"], 9) == 0.1
    assert (got["measured_min_s"], got["measured_max_s"]) == (0.010, 0.012)
    assert bench.over_seeds([{"seed": 1, "measured_s": None}], 0.01)["error"] is None
    settings = [
        {
            "verdict": {"best_right": True},
            "runs": [{**_run("a", 1, 1, 0.1), "per_seed": per_seed}, _run("b", 1, 1, -0.3)],
        }
    ]
    # each seed's run counts: 0.2, 0.0, 0.1 and b's 0.3
    assert bench.figures(settings)["median_iteration_error"] == 0.15
    assert bench.figures(settings)["runs_measured"] == 4
    names = [c.name for c in bench.ALL_SETTINGS]
    assert len(names) == len(set(names)) == 9
    assert all(c.techniques for c in bench.FAMILY_SETTINGS)


def test_the_machine_probe_scales_the_prediction_beside_the_raw_error() -> None:
    bench = _module()
    # measured 12 ms against 10 predicted: +20% raw; the machine probed 1.2x slower than
    # beside the profile: 0% at its speed; 0.8x (faster): +50%
    assert bench.at_probe_speed(0.012, 0.010, 1.2) == pytest.approx(0.0)
    assert bench.at_probe_speed(0.012, 0.010, 0.8) == pytest.approx(0.5)
    assert bench.at_probe_speed(None, 0.010, 1.0) is None
    per_seed = [
        {"seed": 1, "error": 0.2, "error_at_probe_speed": 0.0},
        {"seed": 2, "error": 0.4, "error_at_probe_speed": -0.1},
        {"seed": 3, "error": 0.1},  # a run measured before the probe: raw figure only
    ]
    settings = [{"verdict": {"best_right": True}, "runs": [{"per_seed": per_seed}]}]
    figs = bench.figures(settings)
    assert figs["median_iteration_error"] == 0.2
    assert figs["median_iteration_error_at_probe_speed"] == 0.05
    step = bench.machine_probe("mlp", {"hidden": [8]}, (1, 8, 8), 10, 4, seconds=0.05)
    assert 0 < step < 1


def test_bad_seeds_are_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--seeds", "one", "--work", str(tmp_path / "w")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == "error: --seeds 'one': write seeds as numbers, like 1,2,3\n"
    assert not (tmp_path / "w").exists()


def test_an_unknown_setting_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--settings", "nope", "--work", str(tmp_path / "w")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown setting(s) nope; known: dynacomm,")
    assert proc.stderr.count("\n") == 1
    assert not (tmp_path / "w").exists()


def test_an_interrupt_is_one_line_and_keeps_the_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or SIGTERM, which the script turns into the same) stops the check with one line
    naming where the completed runs are kept, exit 130, and no JSON written."""
    bench = _module()

    def interrupted(*args: object, **kwargs: object) -> dict[str, object]:
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "one_setting", interrupted)
    out = tmp_path / "check.json"
    argv = ["--settings", "dynacomm", "--work", str(tmp_path / "w"), "--out", str(out)]
    code = bench.main([*argv, "--data-root", str(tmp_path)])
    assert code == 130
    err = capsys.readouterr().err
    assert err == (
        f"interrupted: the completed runs are kept in {tmp_path / 'w'}; run the same command "
        "again to resume\n"
    )
    assert not out.exists()


def test_a_missing_data_root_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--data-root", str(missing), "--work", str(tmp_path / "w")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: MNIST directory {missing} not found")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "w").exists()
