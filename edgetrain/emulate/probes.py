"""Probes run inside an emulated host: ``python -m edgetrain.emulate.probes serve|link|cpu``.

``serve`` answers link probes (edgetrain's own transport, :mod:`edgetrain.profile.probe`) on
one address until its standard input closes; ``link`` measures the link to such a server;
``cpu`` counts pure-Python loop iterations per wall-clock second in ``procs`` processes, so a
CPU quota shows as a proportionally lower rate, and the CPU time they were granted; run with
``--idle`` beside a host's probe on the same cores, it measures what the cores could do in
the same window. Each prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import threading
import time
from typing import Any


def spin(seconds: float, warmup: float = 0.25) -> float:
    """Loop iterations per second of wall-clock time, counted over exactly ``seconds``.

    Under a CFS quota a busy process runs from the start of each period until the quota is
    spent. The first ``warmup`` seconds are not counted: a group idle until now gets a whole
    quota in its first, partial period, which would add up to one period's worth. After
    that the run/throttle pattern repeats every period, so a window of whole periods holds
    exactly its share, whatever its phase; and only loop chunks finished inside the window
    count, so a process throttled when the window ends adds no idle time.
    """
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        for _ in range(1000):
            pass
    done = n = 0
    end = time.perf_counter() + seconds
    while True:
        for _ in range(1000):
            n += 1
        if time.perf_counter() > end:
            return done / seconds
        done = n


def timed_spin(seconds: float, start_at: float | None = None) -> tuple[float, float]:
    """``spin``'s rate, and the share of a core this process was granted meanwhile (CPU time
    over wall time). With ``start_at`` (a ``time.time()``), it sleeps until then first, so
    probes in other processes can measure the same window."""
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.time()))
    c0, w0 = time.process_time(), time.perf_counter()
    rate = spin(seconds)
    return rate, (time.process_time() - c0) / (time.perf_counter() - w0)


def _spin_into(seconds: float, start_at: float | None, core: int | None, idle: bool,
               out: Any) -> None:  # fmt: skip
    _place(core, idle)
    out.put(timed_spin(seconds, start_at))


def _place(core: int | None, idle: bool) -> None:
    """Run on ``core`` only; with ``idle``, only when nothing else wants that core."""
    if core is not None:
        os.sched_setaffinity(0, {core})
    if idle:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def cpu_rate(
    seconds: float,
    procs: int,
    start_at: float | None = None,
    pinned: bool = False,
    idle: bool = False,
) -> tuple[float, float]:
    """Total iterations per second of ``procs`` spinning processes (process i on core i if
    ``pinned``), and their total share of a core."""
    if procs == 1:
        _place(0 if pinned else None, idle)
        return timed_spin(seconds, start_at)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    workers = [
        ctx.Process(target=_spin_into, args=(seconds, start_at, i if pinned else None, idle, out))
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    runs = [out.get(timeout=seconds * 20 + 60) for _ in workers]
    for w in workers:
        w.join()
    return float(sum(r for r, _ in runs)), float(sum(s for _, s in runs))


def _start_from_stdin() -> float:
    """Say this probe is up (a ``{"ready": true}`` line), then read the time to start at: the
    caller sends it once every probe of a window is up, so no fixed lead covers ssh and
    Python's start-up."""
    print(json.dumps({"ready": True}), flush=True)
    line = sys.stdin.readline()
    try:
        return float(line)
    except ValueError:
        raise SystemExit(f"expected a start time on standard input, got {line.strip()!r}") from None


def _cgroup() -> str:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.strip().split(":", 2)
                if "cpu" in controllers.split(","):
                    return path
    except OSError:
        pass
    return ""


def _serve(bind: str) -> None:
    from edgetrain.profile.probe import ProbeServer

    stop = threading.Event()
    with ProbeServer(bind, 0) as server:
        print(json.dumps({"endpoint": server.endpoint}), flush=True)

        def wait_for_eof() -> None:
            sys.stdin.read()
            stop.set()

        threading.Thread(target=wait_for_eof, daemon=True).start()
        server.serve(stop, poll_ms=100)


def _link(peer: str, max_transfer_s: float) -> None:
    from edgetrain.profile.probe import ProbeConfig, probe_link

    cfg = ProbeConfig(pings=5, repeats=3, max_transfer_s=max_transfer_s, transfer_timeout_s=120)
    print(json.dumps(probe_link(peer, cfg).to_dict()), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m edgetrain.emulate.probes")
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("--bind", required=True)
    link = sub.add_parser("link")
    link.add_argument("--peer", required=True)
    link.add_argument("--max-transfer-s", type=float, default=1.0)
    cpu = sub.add_parser("cpu")
    cpu.add_argument("--seconds", type=float, default=1.5)
    cpu.add_argument("--procs", type=int, default=1)
    cpu.add_argument("--start-at", type=float, default=None, help="time.time() to start at")
    cpu.add_argument(
        "--start-on-stdin",
        action="store_true",
        help="print a ready line, then read the time.time() to start at from standard input",
    )
    cpu.add_argument("--pinned", action="store_true", help="process i runs on core i only")
    cpu.add_argument("--idle", action="store_true", help="SCHED_IDLE: take only spare time")
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        _serve(args.bind)
    elif args.cmd == "link":
        _link(args.peer, args.max_transfer_s)
    else:
        procs = max(1, args.procs)
        start_at = _start_from_stdin() if args.start_on_stdin else args.start_at
        rate, share = cpu_rate(args.seconds, procs, start_at, args.pinned, args.idle)
        print(json.dumps({"ops_per_s": rate, "cpu_share": share, "procs": args.procs,
                          "cgroup": _cgroup()}))  # fmt: skip


if __name__ == "__main__":
    main()
