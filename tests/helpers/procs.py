"""Find edgetrain processes by scanning /proc (for tests that must leave none behind)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def edgetrain_processes(marker: str | None = None) -> dict[int, str]:
    """pid -> command line of every live ``edgetrain`` launch/worker process (optionally only
    those whose command line contains ``marker``), zombies excluded."""
    out: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        if state == "Z" or "edgetrain" not in cmd:
            continue
        if " worker " not in f" {cmd} " and " launch " not in f" {cmd} ":
            continue
        if marker is None or marker in cmd:
            out[int(entry.name)] = cmd
    return out


def kill_all(pids: dict[int, str]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
