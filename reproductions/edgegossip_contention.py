"""R-EG-7 of the EdgeGossip reproduction: contention that changes mid-run (a co-running load
inside gpu-a's cgroup, or gpu-a's CPU quota cut), started and stopped by following the run's
own barriers, against predictive, reactive and static balance."""

from __future__ import annotations

import math
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.experiment.arms import interleave
from edgetrain.experiment.beds import Bed
from edgetrain.experiment.claims import Row
from edgetrain.experiment.runs import done, run_dir
from edgetrain.experiment.runs import stop as stop_child
from edgetrain.rundir import read_jsonl
from reproductions.edgegossip_plan import BALANCES, SHARES
from reproductions.edgegossip_runs import Batches

LOADGEN = ["-m", "edgetrain.profile.loadgen", "--kind", "cpu", "--intensity", "1"]


@dataclass
class Disturbance:
    """A load (``kind = "load"``: a CPU load generator inside gpu-a's cgroup) or a quota cut
    (``"quota"``: gpu-a's CPU share to 0.3) from half an epoch after the barrier of epoch
    ``start`` until the barrier of epoch ``stop``, following the run's own metrics."""

    kind: str
    bed: Bed
    run_path: Path
    start: int
    stop: int
    log: list[dict[str, Any]] = field(default_factory=list)

    def _barriers(self) -> dict[int, float]:
        rows = read_jsonl(self.run_path / "metrics" / "coordinator.jsonl")
        return {int(r["epoch"]): float(r["t"]) for r in rows if r.get("event") == "barrier"}

    def _on(self) -> subprocess.Popen[bytes] | None:
        tb = self.bed.tb
        assert tb is not None and self.bed.hosts is not None
        if self.kind == "quota":
            from edgetrain.emulate import cgroups

            cgroups.set_cpu(tb.name, "gpu-a", 0.3)
            return None
        return subprocess.Popen(self.bed.command("gpu-a", LOADGEN), stdin=subprocess.DEVNULL)

    def _off(self, proc: subprocess.Popen[bytes] | None) -> None:
        tb = self.bed.tb
        assert tb is not None
        if self.kind == "quota":
            from edgetrain.emulate import cgroups

            cgroups.set_cpu(tb.name, "gpu-a", SHARES[0])
        elif proc is not None and proc.poll() is None:
            stop_child(proc, grace_s=30)  # the ssh session ends; the load generator follows it

    def watch(self, stop: threading.Event) -> None:
        proc: subprocess.Popen[bytes] | None = None
        state = "before"
        try:
            while not stop.wait(0.2):
                barriers = self._barriers() if self.run_path.is_dir() else {}
                if state == "before" and self.start in barriers:
                    prev = barriers.get(self.start - 1, barriers[self.start] - 2.0)
                    stop.wait(max(0.0, (barriers[self.start] - prev) / 2))
                    proc = self._on()
                    state = "on"
                    self.log.append({"on_after_epoch": self.start, "at": time.time()})
                elif state == "on" and self.stop in barriers:
                    self._off(proc)
                    state = "after"
                    self.log.append({"off_after_epoch": self.stop, "at": time.time()})
        finally:
            if state == "on":
                self._off(proc)


@contextmanager
def disturbed(d: Disturbance | None) -> Iterator[None]:
    """``d`` followed in a thread while the block runs (nothing when None)."""
    if d is None:
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(target=d.watch, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)


def contention(runs: Batches, bed: Bed) -> dict[str, list[Row]]:
    """R-EG-7: each scenario, the three balance inputs interleaved seed by seed."""
    p = runs.p
    start = max(1, math.ceil(0.25 * p.side_epochs))
    stop = max(start + 1, math.ceil(0.6 * p.side_epochs))
    got: dict[str, list[Row]] = {}
    for scenario in ("load", "quota"):
        arms = [runs.arm(n, bed, p.side_epochs, f"-{scenario}") for n in BALANCES]
        rows = []
        for arm, seed in interleave(arms, p.seeds):
            path = run_dir(runs.runner.out, arm, seed)
            d = None
            if done(path) is None:  # to be run: the disturbance follows it
                if path.exists():
                    shutil.rmtree(path)  # an incomplete run's metrics must not trigger it
                d = Disturbance(scenario, bed, path, start, stop)
            row = runs.run(arm, seed, bed, f"R-EG-7 {scenario}", disturbed(d))
            if d is not None:
                row["disturbance"] = {
                    "kind": d.kind,
                    "from_epoch": d.start,
                    "to_epoch": d.stop,
                    "log": d.log,
                }
            row.setdefault("disturbance", {"kind": scenario, "from_epoch": start, "to_epoch": stop})
            rows.append(row)
        got[scenario] = rows
    return got
