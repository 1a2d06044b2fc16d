"""scripts/bench_replay.py's pure parts: the arms' rotation, their recipes (which ``edgetrain
check`` accepts), the estimates against the specification's figures, and the summary (the
benchmark itself is not run here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.cli import run_cli

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location("bench_replay", SCRIPTS / "bench_replay.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_arms_rotate_each_repetition(bench: ModuleType) -> None:
    assert bench.rotation(0) == ["pipedream", "mcpipe", "mcpipe-lowrank"]
    assert bench.rotation(1) == ["mcpipe", "mcpipe-lowrank", "pipedream"]
    assert bench.rotation(2) == ["mcpipe-lowrank", "pipedream", "mcpipe"]
    assert bench.rotation(3) == bench.rotation(0)


@pytest.mark.parametrize("arm", ["pipedream", "mcpipe", "mcpipe-lowrank"])
def test_each_arms_recipe_passes_check(
    arm: str,
    bench: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    text = bench.recipe_text(arm, 3, 0)
    assert ('replay = "lowrank"' in text) == (arm == "mcpipe-lowrank")
    (tmp_path / "r.toml").write_text(text)
    code, _, err = run_cli(capsys, "check", "r.toml")
    assert code == 0, err


def test_estimates_against_the_specification(bench: ModuleType) -> None:
    est = bench.estimates(0)
    # stage 0 replays one pending update, the last stage none
    assert est["mcpipe"][1] == 0.0 and est["mcpipe-lowrank"][1] == 0.0
    # the units' MACs per sample: 64 x 2048 and 2048 x 2048; the model's first unit computes
    # no input error: 1 x dW / (2 dW + dI)
    dw = 64 * 2048 + 2048 * 2048
    assert est["mcpipe"][0] == pytest.approx(dw / (2 * dw + 2048 * 2048))
    low = 64 * 2048 * min(1.0, 16 * (64 + 2048) / (64 * 2048)) + 2048 * 2048 / 64
    assert est["mcpipe-lowrank"][0] == pytest.approx(low / (2 * dw + 2048 * 2048))
    # one more pending update per extra window step
    assert bench.estimates(1)["mcpipe"][0] == pytest.approx(2 * est["mcpipe"][0])


def test_summary_pairs_each_repetition(bench: ModuleType) -> None:
    def arm(speed: float, share: float | None) -> dict[str, object]:
        stages = {} if share is None else {0: {"share": share, "resident_bytes": 2**20,
                                               "transient_peak_bytes": 2**21}}  # fmt: skip
        return {"samples_per_s": speed, "stages": stages}

    reps = [
        {"pipedream": arm(100, None), "mcpipe": arm(80, 0.4), "mcpipe-lowrank": arm(120, 0.02)},
        {"pipedream": arm(110, None), "mcpipe": arm(88, 0.5), "mcpipe-lowrank": arm(110, 0.04)},
    ]
    s = bench.summarise(reps, {"mcpipe": {0: 0.4, 1: 0.0}, "mcpipe-lowrank": {0: 0.01}})
    assert s["speed_ratios"]["mcpipe/pipedream"] == {"median": 0.8, "min": 0.8, "max": 0.8}
    assert s["speed_ratios"]["mcpipe-lowrank/mcpipe"]["max"] == pytest.approx(1.5)
    mo = s["arms"]["mcpipe"]["stages"]["0"]["measured_over_estimate"]
    assert mo == {"median": pytest.approx(1.125), "min": 1.0, "max": 1.25}
    assert "1" not in s["arms"]["mcpipe"]["stages"]  # no pending update, no row
    assert s["arms"]["mcpipe"]["stage0_mib"] == {"resident_bytes": 1.0, "transient_peak_bytes": 2.0}
    assert "mcpipe-lowrank" in bench.table({"summary": s, "extra": 0, "repeats": 2})
