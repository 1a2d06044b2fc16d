"""Process supervision: notice exits, and terminate every child on the way out."""

from __future__ import annotations

import time

from edgetrain.launch.base import Launcher, ProcessHandle, WorkerSpec


class Supervisor:
    """Holds the run's worker processes; ``terminate_all`` leaves none behind."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.handles: dict[int, ProcessHandle] = {}
        self.exit_codes: dict[int, int] = {}

    def start(self, spec: WorkerSpec) -> ProcessHandle:
        handle = self.launcher.start(spec)
        self.handles[spec.worker_id] = handle
        return handle

    def newly_exited(self) -> list[tuple[int, int]]:
        """(worker id, exit code) for each process that exited since the last call."""
        out: list[tuple[int, int]] = []
        for wid, handle in self.handles.items():
            if wid in self.exit_codes:
                continue
            code = handle.poll()
            if code is not None:
                self.exit_codes[wid] = code
                out.append((wid, code))
        return out

    def wait_all(self, timeout: float) -> bool:
        """Wait for every process to exit on its own; True if all did within ``timeout``."""
        deadline = time.monotonic() + timeout
        for handle in self.handles.values():
            if handle.wait(max(0.0, deadline - time.monotonic())) is None:
                return False
        return True

    def terminate_all(self, grace: float = 5.0) -> None:
        """SIGTERM every process group, then SIGKILL what is left after ``grace`` seconds."""
        for handle in self.handles.values():
            handle.terminate()
        if not self.wait_all(grace):
            for handle in self.handles.values():
                handle.kill()
            for handle in self.handles.values():
                handle.wait(5.0)
        self.newly_exited()
