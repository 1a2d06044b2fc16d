"""Memory of a stage, measured five ways (specification §7.4), and its compute timers.

The accountant follows what the weight store holds between operations (``resident``: weight
versions, or base plus pending pairs, plus optimiser state: what the paper's theorem bounds),
the largest temporary during an operation on top of it (``transient``: mcPipe's weight being
replayed, a weight-gradient, PipeDream's new version), and the tensors autograd saved for the
microbatches in flight (``activation``). Bytes are counted per storage, so views and shared
tensors count once. The process's peak RSS over a baseline
(:mod:`edgetrain.profile.memory`) and its cgroup's peak (on an emulated host) are read from the
kernel.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch


def storage_bytes(tensors: Iterable[torch.Tensor], seen: set[int] | None = None) -> int:
    """Bytes of the distinct storages behind ``tensors`` (``seen``: storages already counted)."""
    seen = set() if seen is None else seen
    total = 0
    for t in tensors:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr in seen or storage.nbytes() == 0:
            continue
        seen.add(ptr)
        total += storage.nbytes()
    return total


@dataclass
class Accountant:
    """Resident, transient and activation bytes of one stage, with their peaks."""

    resident: int = 0
    resident_peak: int = 0
    temp: int = 0
    transient_peak: int = 0
    activation: int = 0
    activation_peak: int = 0

    def sample(self, resident: int, activation: int) -> None:
        """The store's and the in-flight graphs' bytes now (between operations)."""
        self.resident = resident
        self.resident_peak = max(self.resident_peak, resident)
        self.transient_peak = max(self.transient_peak, resident)
        self.activation = activation
        self.activation_peak = max(self.activation_peak, activation)

    def hold(self, nbytes: int) -> _Held:
        """A temporary of ``nbytes`` lives inside the block (on top of the resident bytes)."""
        return _Held(self, nbytes)

    def figures(self) -> dict[str, int]:
        return {
            "resident_bytes": self.resident_peak,
            "transient_peak_bytes": self.transient_peak,
            "activation_peak_bytes": self.activation_peak,
        }


class _Held:
    """:meth:`Accountant.hold`'s block (a plain class: entered several times per step)."""

    __slots__ = ("acc", "nbytes")

    def __init__(self, acc: Accountant, nbytes: int) -> None:
        self.acc = acc
        self.nbytes = nbytes

    def __enter__(self) -> None:
        acc = self.acc
        acc.temp += self.nbytes
        acc.transient_peak = max(acc.transient_peak, acc.resident + acc.temp)

    def __exit__(self, *exc: object) -> None:
        self.acc.temp -= self.nbytes


class _Timed:
    """:meth:`Timers.time`'s block (a plain class: entered several times per step)."""

    __slots__ = ("seconds", "cpu", "name", "t0", "c0")

    def __init__(self, seconds: dict[str, float], cpu: dict[str, float], name: str) -> None:
        self.seconds = seconds
        self.cpu = cpu
        self.name = name
        self.t0 = 0.0
        self.c0 = 0.0

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()
        self.c0 = time.thread_time()

    def __exit__(self, *exc: object) -> None:
        self.seconds[self.name] = self.seconds.get(self.name, 0.0) + time.perf_counter() - self.t0
        self.cpu[self.name] = self.cpu.get(self.name, 0.0) + time.thread_time() - self.c0


@dataclass
class Timers:
    """Seconds a stage spent in each kind of work (the report's busy fraction and bubble):
    wall time, and the CPU time of the thread that ran the block (``cpu``: the compute's own,
    a stage computing on one torch thread by default; the transport's and heartbeat's threads
    left out). Under a CPU quota the quota's waits land in whichever block runs when the quota
    is spent, so a share of the compute (mcPipe's replay) is read from CPU time."""

    seconds: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)

    def time(self, name: str) -> _Timed:
        return _Timed(self.seconds, self.cpu, name)

    def cpu_get(self, name: str) -> float:
        return self.cpu.get(name, 0.0)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def get(self, name: str) -> float:
        return self.seconds.get(name, 0.0)


# ------------------------------------------------------------------ the kernel's figures


# The memory groups `edgetrain emulate` makes for its hosts live under this directory.
EMULATED = "edgetrain-emulate"


def cgroup_memory_dir(root: Path = Path("/sys/fs/cgroup/memory")) -> Path | None:
    """The cgroup v1 memory group of this process when it runs on an emulated host (a group
    under ``edgetrain-emulate/``), else None: another group (a container's, a desktop
    session's) is not a host's and is neither read nor reset."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):
            rel = parts[2].strip("/")
            if EMULATED not in rel.split("/"):
                return None
            d = root / rel
            return d if (d / "memory.max_usage_in_bytes").is_file() else None
    return None


def reset_cgroup_peak(d: Path | None) -> bool:
    """Reset the group's ``memory.max_usage_in_bytes`` (writing 0); False where not allowed."""
    if d is None:
        return False
    try:
        (d / "memory.max_usage_in_bytes").write_text("0")
    except OSError:
        return False
    return True


def cgroup_figures(d: Path | None) -> dict[str, int | None]:
    """The group's peak and limit (None outside an emulated host)."""
    if d is None:
        return {"cgroup_peak_bytes": None, "cgroup_limit_bytes": None}

    def read(name: str) -> int | None:
        try:
            return int((d / name).read_text().strip())
        except (OSError, ValueError):
            return None

    return {
        "cgroup_peak_bytes": read("memory.max_usage_in_bytes"),
        "cgroup_limit_bytes": read("memory.limit_in_bytes"),
    }
