"""scripts/chaos.py's pure parts (issue 31): the fault draw, the share of faults per run, what a
run lost (on literal run directories), the totals and the report; its refusals (the chaos
runs themselves are the script's, run alone, not here)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "chaos.py"


@pytest.fixture(scope="module")
def chaos() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chaos_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["chaos_script"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_fault_draw_is_seeded_and_covers_kinds_and_workers(chaos: ModuleType) -> None:
    draws = [chaos.pick(random.Random(7), [1, 2, 3], chaos.KINDS) for _ in range(3)]
    assert draws[0] == draws[1] == draws[2]
    rng = random.Random(1)
    many = [chaos.pick(rng, [3, 1, 2], chaos.KINDS) for _ in range(200)]
    assert {k for k, _ in many} == set(chaos.KINDS)
    assert {w for _, w in many} == {1, 2, 3}
    with pytest.raises(ValueError):
        chaos.pick(rng, [], chaos.KINDS)


def test_a_runs_first_shard_fault_is_drawn_among_the_shards(chaos: ModuleType) -> None:
    rng = random.Random(3)
    assert {chaos.pick(rng, [2, 3], chaos.KINDS, [0, 1])[1] for _ in range(50)} == {0, 1}
    assert chaos.pick(rng, [], chaos.KINDS, [0])[1] == 0


def test_the_chaos_runs_restart_shards_where_the_technique_rebuilds_them(
    chaos: ModuleType,
) -> None:
    assert "server" in chaos.restarts_of("dynacomm")
    assert chaos.restarts_of("quickstart") == frozenset({"trainer"})


@pytest.mark.parametrize(
    ("total", "runs", "expected"),
    [(50, 4, [13, 13, 12, 12]), (12, 2, [6, 6]), (3, 4, [1, 1, 1, 0]), (0, 2, [0, 0])],
)
def test_faults_are_shared_over_the_runs(
    chaos: ModuleType, total: int, runs: int, expected: list[int]
) -> None:
    assert chaos.share(total, runs) == expected


def _run(tmp_path: Path, *, status: str = "completed", final: bool = True) -> tuple[Path, str]:
    run = tmp_path / "run"
    (run / "metrics").mkdir(parents=True)
    (run / "model").mkdir()
    workers = [{"id": i, "status": "completed"} for i in range(2)]
    workers[1]["status"] = status
    (run / "manifest.json").write_text(json.dumps({"status": status, "workers": workers}))
    for i in range(2):
        rows = [{"event": "epoch"}] + ([{"event": "final"}] if final or i == 0 else [])
        (run / "metrics" / f"worker-{i}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
    (run / "model" / "final.safetensors").write_bytes(b"weights")
    return run, hashlib.sha256(b"weights").hexdigest()


def test_a_complete_run_lost_nothing(chaos: ModuleType, tmp_path: Path) -> None:
    run, sha = _run(tmp_path)
    assert chaos.problems(run, {}, sha) == []


def test_what_a_run_lost_is_named(chaos: ModuleType, tmp_path: Path) -> None:
    run, sha = _run(tmp_path, status="failed", final=False)
    got = chaos.problems(run, {}, "0" * 64)
    assert got == [
        "status failed: None",
        "worker 1 failed",
        "worker 1 has no final event",
        "the final model file is not the one the run recorded",
    ]
    (run / "model" / "final.safetensors").unlink()
    assert chaos.problems(run, {}, sha)[-1] == "no final model"
    assert chaos.problems(run, None, sha)[-1] == "no summary"
    (run / "manifest.json").write_text("{")
    assert chaos.problems(run, {}, sha)[0].startswith("manifest unreadable")


@pytest.mark.parametrize(
    ("epochs", "train_s", "faults", "expected"),
    [(60, 6.0, 8, 1200), (60, 6.0, 2, 600), (30, 90.0, 4, 30), (6, 18.0, 9, 45)],
)
def test_runs_are_sized_for_their_faults(
    chaos: ModuleType, epochs: int, train_s: float, faults: int, expected: int
) -> None:
    # 15 s of training per fault, at least 60 s, never fewer epochs than the recipe's
    assert chaos.calibrated_epochs(epochs, train_s, faults) == expected
    with pytest.raises(ValueError):
        chaos.calibrated_epochs(0, 1.0, 1)


ROWS: list[dict[str, Any]] = [
    {"recipe": "quickstart", "seed": 0, "arm": "undisturbed", "faults": [], "status": "completed",
     "test_accuracy": 0.95, "problems": [], "startup_s": 6.0},
    {"recipe": "quickstart", "seed": 0, "arm": "chaos", "status": "completed",
     "test_accuracy": 0.9472, "accuracy_delta_points": -0.28, "problems": [], "startup_s": 7.0,
     "faults": [{"kind": "kill", "rejoined": True, "rejoin_s": 4.0, "restart_to_join_s": 8.0},
                {"kind": "stop", "rejoined": True, "rejoin_s": 9.0, "restart_to_join_s": 10.0}]},
    {"recipe": "dynacomm", "seed": 0, "arm": "chaos", "status": "failed", "test_accuracy": 0.9,
     "accuracy_delta_points": -2.0, "problems": ["worker 2 failed"],
     "faults": [{"kind": "term", "rejoined": False}]},
]  # fmt: skip


def test_totals_over_the_chaos_runs(chaos: ModuleType) -> None:
    t = chaos.totals(ROWS)
    assert t["runs"] == 2 and t["completed"] == 1 and t["nothing_lost"] == 1
    assert t["faults"] == 3 and t["by_kind"] == {"kill": 1, "stop": 1, "term": 1}
    assert t["recovered"] == 2 and t["within_accuracy"] == 1
    assert t["rejoin_s"] == {"median": 6.5, "min": 4.0, "max": 9.0}
    assert t["accuracy_delta_points"] == pytest.approx({"median": -1.14, "min": -2.0, "max": -0.28})
    assert t["startup_s"] == {"median": 6.5, "min": 6.0, "max": 7.0}
    assert t["restart_to_join_s"] == {"median": 9.0, "min": 8.0, "max": 10.0}
    assert t["restart_vs_startup"] == pytest.approx(9.0 / 6.5)


def test_the_report_has_a_row_per_run_and_the_skipped(chaos: ModuleType) -> None:
    why = "a ps/mercury worker cannot rejoin a running run yet"
    doc = {"runs": ROWS, "commit": "abc1234", "started": "2026-11-27 05:00",
           "skipped": {"mercury": why}}  # fmt: skip
    doc["totals"] = chaos.totals(ROWS)
    text = chaos.markdown(doc)
    assert "Made by commit abc1234" in text
    assert "| quickstart | 0 | chaos | 2 | 2 | completed | 0.9472 | -0.28 | nothing |" in text
    assert "| dynacomm | 0 | chaos | 1 | 0 | failed | 0.9000 | -2.00 | worker 2 failed |" in text
    assert "- mercury: skipped, a ps/mercury worker cannot rejoin" in text
    assert "Faults recovered (the victim rejoined): 2 of 3" in text


def test_which_shipped_recipes_can_take_faults(chaos: ModuleType) -> None:
    assert chaos.rejoins("quickstart") == (True, "")
    assert chaos.rejoins("dynacomm") == (True, "")
    assert chaos.rejoins("mcpipe") == (True, "")  # a lost stage rewinds the run
    assert chaos.rejoins("mercury") == (True, "")  # so does a lost Mercury device


@pytest.mark.parametrize("argv", [["--recipes", "nope"], ["--faults", "0"], ["--seeds", "0"]])
def test_bad_arguments_are_one_line_exit_2(
    chaos: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert chaos.main(["--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
