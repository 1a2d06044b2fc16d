"""A local worker's CPU quota (``[[workers]] cpu``): one cgroup v1 CPU group per worker.

The group is made before the worker starts; the worker's own shell enters it and then execs
Python, so everything the worker does (imports, calibration, training) runs under the quota.
Unlike ``slowdown`` (a sleep, which /proc shows as idle) a quota is what a real small device
looks like to the worker's resource sampler, which reads its own group. Groups live under
``edgetrain-local/<run id>/worker-<id>`` of the ``cpu`` hierarchy; each is removed once its
worker has exited. Needs root and the cgroup v1 cpu controller (as ``edgetrain emulate``); the
cgroup primitives are :mod:`edgetrain.cgroups`, shared with the emulator's host groups."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from edgetrain import cgroups

TOP = "edgetrain-local"
# The shell moves itself ($$) into the group named by $0, then becomes the worker.
ENTER = 'echo $$ > "$0/cgroup.procs" && exec "$@"'


def unavailable() -> str | None:
    """Why local CPU quotas cannot be made here, or None."""
    if os.geteuid() != 0:
        return "creating cgroups needs root"
    return cgroups.cgroups_unavailable(need_memory=False)


def group_dir(run_id: str, worker_id: int) -> Path:
    return cgroups.CGROUP_ROOT / "cpu" / TOP / run_id / f"worker-{worker_id}"


def create(run_id: str, worker_id: int, cpu: float) -> Path:
    """The worker's group with a quota of ``cpu`` cores (made again on resume)."""
    d = group_dir(run_id, worker_id)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cgroups.CgroupError(f"cannot create cgroup {d}: {exc.strerror or exc}") from None
    cgroups.limit(d, cpu)
    return d


def command(group: Path, argv: list[str]) -> list[str]:
    """``argv`` started inside ``group``."""
    return ["/bin/sh", "-c", ENTER, str(group), *argv]


def remove(group: Path, timeout: float = 2.0) -> bool:
    """Remove an exited worker's group, then its run's and the top group once they are empty.
    True when the worker's group is gone."""
    if cgroups.rmdir(group, timeout) is not None:
        return False
    for parent in (group.parent, group.parent.parent):
        with contextlib.suppress(OSError):
            parent.rmdir()  # only when no other worker or run still has a group there
    return True
