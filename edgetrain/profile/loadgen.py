"""Co-running load generator: CPU and disk load at an intensity in [0, 1], in its own processes.

CPU: one process per core, each busy for ``intensity`` of every 50 ms period and asleep for
the rest. Disk: one process writing 1 MiB blocks with ``fsync`` at ``intensity`` x
``disk_max_Bps``, cycling over a 64 MiB file in ``directory`` that it deletes on exit. Every
process exits on SIGTERM or when its parent dies, so none outlives the profiler.
Run as ``python -m edgetrain.profile.loadgen --kind cpu|disk --intensity U [--dir D]``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

PERIOD_S = 0.05
BLOCK = 2**20
FILE_CAP = 64 * 2**20
DISK_MAX_BPS = 64 * 2**20


def _cpu(intensity: float, parent: int, stop: list[bool]) -> None:
    busy = intensity * PERIOD_S
    x = 0
    while not stop[0] and os.getppid() == parent:
        start = time.perf_counter()
        while time.perf_counter() - start < busy:
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        rest = PERIOD_S - (time.perf_counter() - start)
        if rest > 0:
            time.sleep(rest)


def _disk(intensity: float, directory: Path, max_bps: float, parent: int, stop: list[bool]) -> None:
    block = os.urandom(BLOCK)
    fd, name = tempfile.mkstemp(prefix="edgetrain-loadgen-", dir=directory)
    try:
        offset, start, written = 0, time.monotonic(), 0
        while not stop[0] and os.getppid() == parent:
            os.pwrite(fd, block, offset)
            os.fsync(fd)
            written += BLOCK
            offset = (offset + BLOCK) % FILE_CAP
            ahead = written / (intensity * max_bps) - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
    finally:
        os.close(fd)
        os.unlink(name)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m edgetrain.profile.loadgen")
    p.add_argument("--kind", choices=("cpu", "disk"), required=True)
    p.add_argument("--intensity", type=float, required=True)
    p.add_argument("--parent", type=int, default=os.getppid())
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    p.add_argument("--disk-max-bps", type=float, default=DISK_MAX_BPS)
    args = p.parse_args(argv)
    stop = [False]

    def on_term(*_: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    if args.intensity <= 0:
        return
    if args.kind == "cpu":
        _cpu(min(args.intensity, 1.0), args.parent, stop)
    else:
        _disk(min(args.intensity, 1.0), args.dir, args.disk_max_bps, args.parent, stop)


@contextlib.contextmanager
def load(
    intensity: float,
    cpu_workers: int | None = None,
    disk: bool = True,
    directory: Path | None = None,
    cores: float | None = None,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Run the load generator at ``intensity`` for the ``with`` block, then stop and reap it.

    ``cores``: the CPU the load is a fraction of (an emulated host's quota, say): intensity 1
    then keeps ``cores`` cores busy, spread over ceil(cores) processes, and the disk writer's
    rate is scaled by min(1, cores), so a small host's load is a fraction of what that host can
    do, not of the machine (on a 0.19-core host the machine-sized load saturated the quota at
    every level, and the profile measured nothing but throttling). Default: one process per
    machine core at ``intensity``, the disk at up to 64 MiB/s."""
    procs: list[subprocess.Popen[bytes]] = []
    if intensity > 0:
        base = [sys.executable, "-m", "edgetrain.profile.loadgen", "--parent", str(os.getpid())]
        if cores is None:
            n = (os.cpu_count() or 1) if cpu_workers is None else cpu_workers
            each, disk_bps = intensity, float(DISK_MAX_BPS)
        else:
            n = max(1, math.ceil(cores)) if cpu_workers is None else cpu_workers
            each, disk_bps = intensity * cores / n, DISK_MAX_BPS * min(1.0, cores)
        cpu = [*base, "--intensity", f"{each:.6g}"]
        argvs = [[*cpu, "--kind", "cpu"] for _ in range(n)]
        if disk:
            where = str(directory or tempfile.gettempdir())
            argvs.append(
                [*base, "--intensity", f"{intensity:.6g}", "--kind", "disk", "--dir", where,
                 "--disk-max-bps", f"{disk_bps:.6g}"]
            )  # fmt: skip
        try:
            for argv in argvs:
                procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL))
        except BaseException:
            _reap(procs)
            raise
    try:
        yield procs
    finally:
        _reap(procs)


def _reap(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
