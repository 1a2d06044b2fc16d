"""scripts/bench_rg_gate.py's pure part: per arm and host, the in-run error per seed and its
median against the goal (literal rows); and a bad --seeds refused in one line, nothing run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_rg_gate.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_rg_gate", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(arm: str, seed: int, a: float, b: float) -> dict[str, object]:
    return {"arm": arm, "seed": seed, "train_s": 13.04, "final_accuracy": 0.97,
            "predictor_mape_by_host": {"gpu-a": a, "cpu-b": b}}  # fmt: skip


def test_summary_per_host_in_seed_order_with_the_goal() -> None:
    bench = _module()
    rows = [
        _row("eg-rg-always", 2, 0.079, 0.205), _row("edgegossip", 2, 0.096, 0.142),
        _row("edgegossip", 1, 0.062, 0.138), _row("eg-rg-always", 1, 0.092, 0.200),
        _row("edgegossip", 3, 0.084, 0.127), _row("eg-rg-always", 3, 0.091, 0.185),
    ]  # fmt: skip
    got = bench.summarise(rows)
    assert got["edgegossip"]["per_seed_pct"] == {
        "gpu-a": [6.2, 9.6, 8.4],
        "cpu-b": [13.8, 14.2, 12.7],
    }
    assert got["edgegossip"]["median_pct"] == {"gpu-a": 8.4, "cpu-b": 13.8}
    assert got["edgegossip"]["goal_met"] is True
    assert got["eg-rg-always"]["median_pct"] == {"gpu-a": 9.1, "cpu-b": 20.0}
    assert got["eg-rg-always"]["goal_met"] is False  # cpu-b over 15%
    assert got["edgegossip"]["train_s"] == [13.0, 13.0, 13.0]


def test_bad_seeds_is_refused_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--seeds", "0", "--work", str(tmp_path / "w")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --seeds must be at least 1"
    assert not (tmp_path / "w").exists()
