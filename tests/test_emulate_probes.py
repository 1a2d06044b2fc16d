"""The CPU probe's start on a time it reads after saying it is up (``emulate up --verify``
starts each window once both of its probes are up, not after a fixed lead)."""

from __future__ import annotations

import json
import subprocess
import sys
import time


def _probe(*extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "edgetrain.emulate.probes", "cpu", "--seconds", "0.2", *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_cpu_probe_says_it_is_up_then_starts_when_told() -> None:
    proc = _probe("--start-on-stdin")
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert json.loads(proc.stdout.readline()) == {"ready": True}
        told = time.time()
        proc.stdin.write(f"{told + 0.3:.6f}\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=60)
        took = time.time() - told
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["ops_per_s"] > 0 and 0 < result["cpu_share"] <= 1.05
    assert took >= 0.5  # waited for the start time, then spun 0.2 s


def test_a_start_time_that_is_not_one_is_refused_in_one_line() -> None:
    proc = _probe("--start-on-stdin")
    out, err = proc.communicate("soon\n", timeout=60)
    assert proc.returncode != 0
    assert err.strip().splitlines() == ["expected a start time on standard input, got 'soon'"]
