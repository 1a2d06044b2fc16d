"""``edgetrain launch`` in a subprocess, followed through its event stream (``--events -``).

A :class:`Launch` reads the launcher's stdout, one JSON line per run event, on a thread, so a
test can block until an event happens (every worker ended an epoch, a checkpoint was written, a
worker failed) instead of polling files; at the end it returns the summary, the last line.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Row = dict[str, Any]


class Launch:
    """A running ``edgetrain launch RECIPE --events - --format json``."""

    def __init__(self, recipe: Path | None, runs: Path, *extra: str, **popen: Any) -> None:
        """``recipe`` None: ``extra`` says what to launch (``--resume RUN``)."""
        argv = [sys.executable, "-m", "edgetrain", "launch"]
        argv += [str(recipe), "--runs-root", str(runs)] if recipe is not None else []
        argv += ["--events", "-", "--format", "json", *extra]
        popen.setdefault("cwd", runs.parent)
        popen.setdefault("start_new_session", True)  # signal() reaches its whole group
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
        )
        self.rows: list[Row] = []
        self._queue: queue.Queue[Row | None] = queue.Queue()
        self._err: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                self._queue.put(json.loads(line))
        self._queue.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self._err.extend(self.proc.stderr)

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    def wait_event(self, match: Callable[[Row], bool], timeout: float, what: str) -> Row:
        """Block until an event matching ``match`` arrives; fail after ``timeout``."""
        for row in self.rows:
            if match(row):
                return row
        while True:
            try:
                row = self._queue.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"no event: {what} within {timeout:g} s")
            if row is None:
                self.proc.wait(timeout=30)
                pytest.fail(f"the launcher ended before {what}: {self.stderr[-2000:]}")
            self.rows.append(row)
            if match(row):
                return row

    def wait_epochs(self, workers: int, epoch: int = 1, timeout: float = 120) -> None:
        """Until every one of ``workers`` workers has ended epoch ``epoch``."""
        for w in range(workers):
            self.wait_event(
                lambda r, w=w: (
                    r.get("event") == "epoch"
                    and r.get("worker") == w
                    and r.get("epoch", 0) >= epoch
                ),
                timeout,
                f"worker {w} ends epoch {epoch}",
            )

    @property
    def run_dir(self) -> Path:
        """The run directory (the stream's first line, ``launch``, names it)."""
        row = self.wait_event(lambda r: r.get("event") == "launch", 120, "the launch line")
        return Path(row["run_dir"])

    def manifest(self) -> dict[str, Any]:
        return dict(json.loads((self.run_dir / "manifest.json").read_text()))

    def pids(self) -> dict[int, int]:
        return {w["id"]: w["pid"] for w in self.manifest()["workers"]}

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the launcher's whole process group (a terminal's Ctrl-C)."""
        os.killpg(self.proc.pid, sig)

    def finish(self, timeout: float = 200) -> tuple[int, Row | None]:
        """Wait for the launcher to exit: its exit code and the summary (the last line)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the launcher did not exit within {timeout:g} s: {self.stderr[-2000:]}")
        while (row := self._queue.get(timeout=30)) is not None:
            self.rows.append(row)
        summary = next((r for r in reversed(self.rows) if r.get("event") == "summary"), None)
        return self.proc.returncode, summary

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait(timeout=30)


def completed(recipe: Path, runs: Path, timeout: float = 150, **popen: Any) -> tuple[Launch, Row]:
    """Launch ``recipe`` and wait for it: the launch and its summary, once it exited 0 with a
    completed run (the launcher is killed whatever happens)."""
    launch = Launch(recipe, runs, **popen)
    try:
        code, summary = launch.finish(timeout=timeout)
    finally:
        launch.kill()
    assert code == 0, launch.stderr
    assert summary is not None and summary["status"] == "completed", summary
    return launch, summary
