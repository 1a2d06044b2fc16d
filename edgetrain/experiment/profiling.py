"""A reproduction's cost-model input: ``edgetrain profile`` of a model run inside one host of
its testbed (here, for local processes), so that the profile is measured at the host's CPU
share, the fastest of a few tries, kept in ``OUT/profiles`` and never measured again."""

from __future__ import annotations

import json
import math
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment.beds import Bed
from edgetrain.experiment.kept import kept

INPUTS = {"mnist": "1x28x28", "digits": "1x8x8"}
PROFILE_TRIES = 3  # a reproduction's profile: the fastest of this many


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
    b: Bed,
    host: str,
    argv: list[str],
    path: Path,
    say: Callable[[str], None],
    what: str,
    tries: int = PROFILE_TRIES,
) -> dict[str, Any]:
    """The profile ``argv`` measures inside ``host`` of ``b`` (kept at ``path``): the fastest
    of ``tries`` (:func:`fastest`), each try's sustained step kept in it (``tries_step_s``)."""

    def make() -> dict[str, Any]:
        say(f"profiling {what} on {host} (the cost model's input, before any measured run)")
        args = argv
        if b.hosts is None:  # local processes: no shell between, so no quoting
            args = [shlex.split(a)[0] if a.startswith("'") else a for a in argv]
        docs = []
        for _ in range(max(1, tries)):
            proc = subprocess.run(
                b.command(host, args), capture_output=True, text=True, timeout=900, check=False
            )
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise EdgetrainError(f"profiling {what} on {host} failed: {tail}")
            docs.append(json.loads(proc.stdout))
        return fastest(docs)

    return dict(kept(path, make))


def step_of(doc: Mapping[str, Any]) -> float:
    """A profile's sustained step (its plain step where it has none; inf: neither)."""
    for key in ("sustained_step_s", "step_s"):
        value = doc.get(key)
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    return math.inf


def fastest(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The profile with the least sustained step among ``docs`` (interference only ever slows
    a measurement down: one profile of LeNet-5 inside a 0.76-core host, taken right after
    another host's contention profile, read 43% slower than one taken minutes before), with
    every try's step in ``tries_step_s``. Pure."""
    if not docs:
        raise ValueError("no profile to choose from")
    best = dict(docs[min(range(len(docs)), key=lambda i: step_of(docs[i]))])
    if len(docs) > 1:
        best["tries_step_s"] = [step_of(d) for d in docs]
    return best
