"""What a launcher must provide: start a worker command on a host and control the process."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class WorkerSpec:
    """One worker to start: the ``edgetrain`` arguments, extra environment and its log file.

    ``slot`` is the host slot it runs in (a launcher with hosts; default: its id)."""

    worker_id: int
    host: str
    args: tuple[str, ...]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    slot: int | None = None
    # A local worker's CPU quota in cores (``[[workers]] cpu``) and its run id (the group's name)
    cpu: float | None = None
    run_id: str = ""
    # Written to the worker's standard input once it starts (the run's secret: never in argv).
    stdin: bytes = b""


class ProcessHandle(Protocol):
    """A started worker process, wherever it runs."""

    worker_id: int
    host: str

    @property
    def pid(self) -> int | None: ...

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM to its whole process group)."""

    def kill(self) -> None:
        """Stop it now (SIGKILL to its whole process group)."""

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds; the exit code, or None if still running."""


class Launcher(Protocol):
    """Starts worker processes: :class:`~edgetrain.launch.local.LocalLauncher` on this machine,
    :class:`~edgetrain.launch.ssh.SshLauncher` on the hosts of a hosts file."""

    def start(self, spec: WorkerSpec) -> ProcessHandle: ...
