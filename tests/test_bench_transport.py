"""scripts/bench_transport runs every way between two real processes and checks a whole PS pull
copies the shard's weights (no timing is asserted: the figures are the benchmark's, run
alone)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(180)
def test_bench_transport_measures_every_way_and_a_whole_pull() -> None:
    argv = [sys.executable, str(REPO / "scripts" / "bench_transport"), "--no-netns",
            "--sizes", "0.0625,17", "--repeats", "1", "--pull-models", "cnn2",
            "--pull-repeats", "1", "--format", "json"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=170, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    gloo = doc["gloo"]
    ways = {"raw", "zmq", "edgetrain", *({"gloo"} if gloo else set())}
    assert [r["mib"] for r in doc["loopback"]] == [0.0625, 17]  # 17 MiB: two frames
    for row in doc["loopback"]:
        assert {f"{w}_gbps" for w in ways} <= set(row) and row["ratio"] > 0
        assert ("ratio_gloo" in row) == gloo
    (pull,) = doc["pull"]  # the pull asserted the trainer ended with the shard's weights
    assert pull["model"] == "cnn2" and pull["tensors"] == 8
    assert {f"{w}_ms" for w in ways - {"zmq"}} == {k for k in pull if k.endswith("_ms")}
    (push,) = doc["push"]  # the shard checked every gradient it took
    assert push["model"] == "cnn2" and {k for k in push if k.endswith("_ms")} == {
        k for k in pull if k.endswith("_ms")
    }
    assert doc["tbf_100mbit"] == [] and doc["keep_buffers"] is True


def test_bench_transport_refuses_a_bad_size_or_model_in_one_line() -> None:
    cases = {"--sizes": ("0,1", "positive MiB"), "--pull-models": ("nosuchnet", "unknown model")}
    for flag, (value, says) in cases.items():
        argv = [
            sys.executable,
            str(REPO / "scripts" / "bench_transport"),
            "--no-netns",
            flag,
            value,
        ]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 2 and "Traceback" not in out.stderr
        last = out.stderr.strip().splitlines()[-1]
        assert flag in last and says in last
