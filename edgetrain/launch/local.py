"""Start workers as processes on this machine, each in its own process group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from edgetrain.launch import cpuquota
from edgetrain.launch.base import WorkerSpec

# What makes a worker write its stacks (edgetrain.worker.main.STACKS_SIGNAL; not imported:
# the launcher has no need of the worker's modules).
STACKS_SIGNAL = signal.SIGUSR1


class LocalProcess:
    """A local worker process. Its stdin is a pipe: closing it tells the worker to exit."""

    def __init__(
        self, spec: WorkerSpec, popen: subprocess.Popen[bytes], group: Path | None = None
    ) -> None:
        self.worker_id = spec.worker_id
        self.host = spec.host
        self._popen = popen
        self._group = group  # its CPU quota's cgroup, removed once it has exited
        self.stacks = stacks_path(spec)

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

    def dump_stacks(self, timeout: float = 1.0) -> str | None:
        """Ask the worker for its Python stacks (SIGUSR1, to it alone: its group may hold
        helpers that would die of it) and wait up to ``timeout`` s for them; the file, or None
        when nothing came (a stopped or dead process cannot answer)."""
        if self._popen.poll() is not None or stopped(self._popen.pid):
            return None
        before = _size(self.stacks)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self._popen.pid, STACKS_SIGNAL)
        deadline = time.monotonic() + timeout
        size = before
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = _size(self.stacks)
            if now > before and now == size:  # written, and no longer growing
                return str(self.stacks)
            size = now
        return str(self.stacks) if _size(self.stacks) > before else None

    def wait(self, timeout: float) -> int | None:
        try:
            return self._exited(self._popen.wait(timeout=timeout), 0.5)
        except subprocess.TimeoutExpired:
            return None


def stacks_path(spec: WorkerSpec) -> Path:
    """Where a local worker writes its Python stacks: ``RUN/logs/worker-N.stacks``."""
    return spec.log_path.with_suffix(".stacks")


def stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (SIGSTOP, a debugger). A stopped process cannot write its
    stacks, and a signal sent to it would be handled when it resumes, while its other threads
    run again: faulthandler then reads their frames as they change, and a worker resumed that
    way crashed with SIGSEGV. False where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[-1].split()
    return bool(fields) and fields[0] in ("T", "t")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class LocalLauncher:
    """Runs ``python -m edgetrain <args>`` with this interpreter, logging to the spec's file;
    a spec with a CPU quota starts inside its own cgroup (:mod:`edgetrain.launch.cpuquota`)."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def start(self, spec: WorkerSpec) -> LocalProcess:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **spec.env}
        argv = [self.python, "-m", "edgetrain", *spec.args]
        if spec.args[:1] == ("worker",):
            argv += ["--stacks", str(stacks_path(spec))]
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
        write_stdin(popen, spec.stdin)
        return LocalProcess(spec, popen, group)


def write_stdin(popen: subprocess.Popen[bytes], data: bytes) -> None:
    """Hand ``data`` (the run's secret) to a started worker on its standard input, which stays
    open: closing it tells the worker to exit. A worker already gone is noticed by its exit."""
    if data and popen.stdin is not None:
        with contextlib.suppress(OSError):
            popen.stdin.write(data)
            popen.stdin.flush()
