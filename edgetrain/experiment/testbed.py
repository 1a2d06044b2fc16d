"""The emulated testbed a batch of runs stands on: ``emulate up --verify`` before, ``down``
after, the verification tables kept for the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment.runs import stop


@dataclass(frozen=True)
class Testbed:
    name: str
    hosts_file: Path
    verify: dict[str, Any]


def _edgetrain(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgetrain", *args], capture_output=True, text=True, timeout=timeout
    )


@contextmanager
def testbed(spec: Path, name: str) -> Iterator[Testbed]:
    """Bring ``spec`` up as ``name`` and verify it; always bring it down afterwards."""
    if os.geteuid() != 0:
        raise EdgetrainError(
            "the emulated testbed needs root",
            "run the reproduction with sudo (or --smoke, on local processes; some scripts also "
            "take --testbed local)",
        )
    _edgetrain("emulate", "down", name)  # a testbed left by an interrupted run
    try:
        # inside the try: Ctrl-C while it comes up (verification takes a minute) kills
        # ``emulate up`` half-way, and only ``down`` removes what it had made
        up = _edgetrain("emulate", "up", str(spec), "--name", name, "--verify", "--format", "json")
        if up.returncode not in (0, 1) or not up.stdout.strip():
            tail = (up.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise EdgetrainError(f"emulate up {spec} failed: {tail}")
        data = json.loads(up.stdout)
        verify = data.get("verify") or {}
        if not verify.get("ok"):
            raise EdgetrainError(
                f"testbed {name} did not verify: {json.dumps(verify)[:400]}",
                "is the machine busy? run reproductions on an idle machine",
            )
        yield Testbed(name, Path(data["hosts_file"]), verify)
    finally:
        _edgetrain("emulate", "down", name)


@contextmanager
def trace_running(name: str, trace: Path) -> Iterator[None]:
    """``edgetrain emulate trace NAME TRACE`` in the background while the block runs; then
    stopped with SIGTERM, on which it puts the spec's values back (SIGINT cannot be the
    signal: a process a script starts in the background ignores it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgetrain", "emulate", "trace", name, str(trace)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        stop(proc, grace_s=30)


def verify_markdown(tb: Testbed) -> str:
    """The verification tables as Markdown, for the report."""
    lines = [
        "| link class | path | limit Mbit/s | measured Mbit/s | error |",
        "|---|---|---:|---:|---:|",
    ]
    for link in tb.verify.get("links", []):
        lines.append(
            f"| {link.get('kind')} {link.get('label')} | {link.get('src')} -> {link.get('dst')} | "
            f"{link.get('limit_bps', 0) / 1e6:.1f} | {link.get('measured_bps', 0) / 1e6:.1f} | "
            f"{link.get('error', 0):+.1%} |"
        )
    lines += ["", "| host | share | ratio | expected | error |", "|---|---:|---:|---:|---:|"]
    for cpu in tb.verify.get("cpus", []):
        lines.append(
            f"| {cpu.get('host')} | {cpu.get('share')} | {cpu.get('ratio', 0):.3f} | "
            f"{cpu.get('expected_ratio', 0):.3f} | {cpu.get('error', 0):+.1%} |"
        )
    return "\n".join(lines)
