"""scripts/bench_exchange runs a few iterations and writes every mode's parts (no timing is
asserted: the figures are the benchmark's, run alone)."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_bench_exchange_writes_every_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "exchange.json"
    argv = ["bench_exchange", "--iterations", "3", "--warmup", "1", "--format", "json"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out)])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(REPO / "scripts" / "bench_exchange.py"), run_name="__main__")
    assert done.value.code == 0
    doc = json.loads(out.read_text())
    assert doc["parameters"] > 0 and doc["compute_ms"] > 0
    modes = {r["mode"]: r for r in doc["modes"]}
    assert set(modes) == {"dlion-dense", "dlion-top0.1", "dlion-top0.01", "gaia", "ako"}
    n = doc["parameters"]
    # what each mode sends to 3 peers: dense 4 bytes an entry, top-k 8 an entry
    assert modes["dlion-dense"]["bytes_per_iteration"] == 3 * 4 * n
    assert modes["dlion-top0.1"]["bytes_per_iteration"] == 3 * 8 * int(0.1 * n)
    for row in modes.values():
        assert row["exchange_ms"] > 0 and row["share_of_compute"] > 0
