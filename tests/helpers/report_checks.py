"""What every report must hold, checked on a real run directory by ``edgetrain report``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import run_cli

PLOTS = ("accuracy.png", "loss.png")


def report_again(capsys: pytest.CaptureFixture[str], run: Path) -> dict[str, Any]:
    """Run ``edgetrain report RUN`` with its plots and summary removed, check it wrote them
    again (accuracy and loss against training time) with the loss in every point of the curve,
    and return the summary."""
    for name in (*PLOTS, "summary.json"):
        (run / "report" / name).unlink(missing_ok=True)
    code, out, err = run_cli(capsys, "report", str(run), "--format", "json")
    assert code == 0, err
    summary: dict[str, Any] = json.loads(out)
    for name in PLOTS:
        assert (run / "report" / name).read_bytes()[:4] == b"\x89PNG", name
    assert Path(summary["plot"]).name == "accuracy.png"
    assert Path(summary["loss_plot"]).name == "loss.png"
    on_disk = json.loads((run / "report" / "summary.json").read_text())
    assert on_disk["curve"], "no epoch in the curve"
    assert all(isinstance(p["loss"], float) for p in on_disk["curve"]), on_disk["curve"]
    assert all(p["train_s"] > 0 for p in on_disk["curve"])
    return summary
