"""Start workers as processes on this machine, each in its own process group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from edgetrain.launch import cpuquota
from edgetrain.launch.base import WorkerSpec


class LocalProcess:
    """A local worker process. Its stdin is a pipe: closing it tells the worker to exit."""

    def __init__(
        self, spec: WorkerSpec, popen: subprocess.Popen[bytes], group: Path | None = None
    ) -> None:
        self.worker_id = spec.worker_id
        self.host = spec.host
        self._popen = popen
        self._group = group  # its CPU quota's cgroup, removed once it has exited

    @property
    def pid(self) -> int | None:
        return self._popen.pid

    def _exited(self, code: int | None, patience: float) -> int | None:
        if code is not None and self._group is not None and cpuquota.remove(self._group, patience):
            self._group = None
        return code

    def poll(self) -> int | None:
        return self._exited(self._popen.poll(), 0.0)

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
            return self._exited(self._popen.wait(timeout=timeout), 0.5)
        except subprocess.TimeoutExpired:
            return None


class LocalLauncher:
    """Runs ``python -m edgetrain <args>`` with this interpreter, logging to the spec's file;
    a spec with a CPU quota starts inside its own cgroup (:mod:`edgetrain.launch.cpuquota`)."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def start(self, spec: WorkerSpec) -> LocalProcess:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **spec.env}
        argv = [self.python, "-m", "edgetrain", *spec.args]
        group = None
        if spec.cpu is not None:
            group = cpuquota.create(spec.run_id, spec.worker_id, spec.cpu)
            argv = cpuquota.command(group, argv)
        with spec.log_path.open("ab") as log:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        return LocalProcess(spec, popen, group)
