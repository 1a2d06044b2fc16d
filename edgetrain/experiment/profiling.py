"""A reproduction's cost-model input: ``edgetrain profile`` of a model run inside one host of
its testbed (here, for local processes), so that the profile is measured at the host's CPU
share, kept in ``OUT/profiles`` and never measured twice."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment.beds import Bed
from edgetrain.experiment.kept import kept

INPUTS = {"mnist": "1x28x28", "digits": "1x8x8"}


def profile_argv(
    model: str,
    dataset: str,
    batch: int,
    host: str,
    options: Mapping[str, Any] | None = None,
    threads: int | None = 1,
) -> list[str]:
    """``python -m edgetrain profile`` of ``model`` at ``batch`` on the dataset's input, as JSON
    (each model option shell-quoted: over ssh the argv is one command line), on ``threads``
    threads: one, as a worker runs by default. Under a host's CPU quota, more threads than the
    worker's burn the quota faster and the profile misses the run (it read 2.8x slow)."""
    args = ["-m", "edgetrain", "profile", "--model", model, "--input", INPUTS[dataset]]
    args += ["--batch-sizes", str(batch), "--repeats", "5", "--warmup", "2", "--min-time", "0.5"]
    if threads is not None:
        args += ["--threads", str(threads)]
    for key, value in (options or {}).items():
        args += ["--model-option", shlex.quote(f"{key}={json.dumps(value, separators=(',', ':'))}")]
    return args + ["--host-name", host, "--format", "json"]


def profile_in_host(
    b: Bed, host: str, argv: list[str], path: Path, say: Callable[[str], None], what: str
) -> dict[str, Any]:
    """The profile ``argv`` measures inside ``host`` of ``b`` (kept at ``path``)."""

    def make() -> dict[str, Any]:
        say(f"profiling {what} on {host} (the cost model's input, before any measured run)")
        args = argv
        if b.hosts is None:  # local processes: no shell between, so no quoting
            args = [shlex.split(a)[0] if a.startswith("'") else a for a in argv]
        proc = subprocess.run(
            b.command(host, args), capture_output=True, text=True, timeout=900, check=False
        )
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise EdgetrainError(f"profiling {what} on {host} failed: {tail}")
        doc: dict[str, Any] = json.loads(proc.stdout)
        return doc

    return dict(kept(path, make))
