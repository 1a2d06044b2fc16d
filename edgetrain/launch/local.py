"""Start workers as processes on this machine, each in its own process group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from edgetrain.launch.base import WorkerSpec


class LocalProcess:
    """A local worker process. Its stdin is a pipe: closing it tells the worker to exit."""

    def __init__(self, spec: WorkerSpec, popen: subprocess.Popen[bytes]) -> None:
        self.worker_id = spec.worker_id
        self.host = spec.host
        self._popen = popen

    @property
    def pid(self) -> int | None:
        return self._popen.pid

    def poll(self) -> int | None:
        return self._popen.poll()

    def _signal_group(self, sig: int) -> None:
        if self._popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, sig)

    def terminate(self) -> None:
        self._signal_group(signal.SIGTERM)
        if self._popen.stdin is not None:
            with contextlib.suppress(OSError):
                self._popen.stdin.close()

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)

    def wait(self, timeout: float) -> int | None:
        try:
            return self._popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


class LocalLauncher:
    """Runs ``python -m edgetrain <args>`` with this interpreter, logging to the spec's file."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def start(self, spec: WorkerSpec) -> LocalProcess:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **spec.env}
        with spec.log_path.open("ab") as log:
            popen = subprocess.Popen(
                [self.python, "-m", "edgetrain", *spec.args],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        return LocalProcess(spec, popen)
