"""The DynaComm reproduction's whole path at smoke size: the four schedules as real runs,
interleaved and resumable, into paper-vs-edgetrain.{md,json} of the shared shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgetrain.reproduce import dynacomm


@pytest.mark.timeout(300)
def test_smoke_reproduction_writes_the_report_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert dynacomm.main(["--smoke", "--out", str(out), "--format", "json"]) == 0
    doc = json.loads((out / "paper-vs-edgetrain.json").read_text())
    assert doc["paper"] == "dynacomm"
    ids = {c["id"] for c in doc["claims"]}
    assert {"R-DC1", "R-DC1c", "R-DC5"} <= ids
    for claim in doc["claims"]:
        assert set(claim) >= {
            "id", "claim", "paper_value", "ours", "unit", "seeds", "direction_agrees",
            "deviations",
        }  # fmt: skip
    same = next(c for c in doc["claims"] if c["id"] == "R-DC5")
    assert same["ours"]["median"] == 1 and same["direction_agrees"]  # one model for four schedules
    assert len(doc["runs"]) == 4 and {r["seed"] for r in doc["runs"]} == {1}
    md = (out / "paper-vs-edgetrain.md").read_text()
    assert "| R-DC1 |" in md and "## Iteration time per setting" in md
    # resumable: a second pass finds every run done and launches nothing
    mtimes = {p: p.stat().st_mtime for p in (out / "runs").glob("*/report/summary.json")}
    assert dynacomm.main(["--smoke", "--out", str(out), "--format", "json"]) == 0
    assert {p: p.stat().st_mtime for p in mtimes} == mtimes
