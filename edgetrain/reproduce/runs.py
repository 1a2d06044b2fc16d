"""Arms of a reproduction run side by side: same recipe but for the technique, same seeds,
interleaved (A, B, A, B per seed), each a real ``edgetrain launch`` into
``OUT/runs/<arm>-s<seed>``; a run whose report says it completed is not run again, so a
reproduction can be stopped and continued in pieces."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError

STOP_GRACE_S = 120.0
"""How long a stopped launcher may take to stop its workers and write its manifest."""


@dataclass(frozen=True)
class Arm:
    """One side of a comparison: a name and the recipe text it launches (``{seed}`` is filled)."""

    name: str
    recipe: str
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def interleave(arms: Sequence[Arm], seeds: Sequence[int]) -> list[tuple[Arm, int]]:
    """Seed by seed, every arm in turn: A s1, B s1, A s2, B s2, ..."""
    return [(arm, seed) for seed in seeds for arm in arms]


def run_dir(out: Path, arm: Arm, seed: int) -> Path:
    return out / "runs" / f"{arm.name}-s{seed}"


def done(path: Path) -> dict[str, Any] | None:
    """The summary of a completed run in ``path`` (None: absent, incomplete or failed)."""
    summary = path / "report" / "summary.json"
    if not summary.is_file():
        return None
    data = json.loads(summary.read_text())
    return data if data.get("status") in ("completed", "diverged") else None


def run_arm(
    out: Path,
    arm: Arm,
    seed: int,
    hosts: Path | None = None,
    timeout_s: float = 3600,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Launch one arm at one seed unless it already completed; return its summary."""
    path = run_dir(out, arm, seed)
    if (summary := done(path)) is not None:
        if say:
            say(f"{path.name}: done before, kept")
        return summary
    if path.exists():
        shutil.rmtree(path)  # a run that did not complete: start it again
    path.parent.mkdir(parents=True, exist_ok=True)
    recipe = out / "recipes" / f"{arm.name}-s{seed}.toml"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    recipe.write_text(arm.recipe.format(seed=seed))
    argv = [sys.executable, "-m", "edgetrain", "launch", str(recipe), "--run-dir", str(path)]
    argv += ["--format", "json", "--quiet-logs", *arm.extra_args]
    if hosts is not None:
        argv += ["--hosts", str(hosts)]
    if say:
        say(f"{path.name}: running")
    stderr = launch(argv, {**os.environ, **arm.env}, timeout_s, path)
    summary = done(path)
    if summary is None:
        tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EdgetrainError(f"run {path.name} did not complete: {tail}", f"see {path}/logs")
    return summary


def launch(argv: list[str], env: dict[str, str], timeout_s: float, path: Path) -> str:
    """Run one ``edgetrain launch`` to its end and return its standard error.

    The launcher runs in its own session, so a terminal's Ctrl-C reaches only the reproduction,
    which passes it on as one SIGTERM and waits while the launcher stops its workers and marks
    the run ``interrupted`` (``subprocess.run`` would SIGKILL it a quarter second after Ctrl-C,
    leaving the manifest ``running``). A run past ``timeout_s`` is stopped the same way."""
    with subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    ) as proc:
        try:
            return proc.communicate(timeout=timeout_s)[1]
        except subprocess.TimeoutExpired:
            stop(proc)
            raise EdgetrainError(
                f"run {path.name} took longer than {timeout_s:g} s and was stopped",
                f"see {path}/logs",
            ) from None
        except KeyboardInterrupt:
            stop(proc)
            raise


def stop(proc: subprocess.Popen[Any], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM a child (a launcher, a trace player) and wait for its clean-up; SIGKILL it if
    that takes over ``grace_s`` or a second Ctrl-C cuts the wait short (a launcher's workers
    end when it does)."""
    try:
        proc.terminate()
        proc.communicate(timeout=grace_s)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def data_section(dataset: str, root: Path | None) -> str:
    """The ``[data]`` body of a reproduction recipe: digits, or MNIST from ``root`` (8k/2k)."""
    if dataset == "digits":
        return 'dataset = "digits"\n'
    return f'dataset = "mnist"\nroot = "{root}"\ntest_split = 0.2\n'


def time_to(summary: dict[str, Any], target: float | None) -> float | None:
    """Training seconds until the workers' mean accuracy first reaches ``target``."""
    if target is None:
        return None
    for point in summary.get("curve", []):
        acc = point.get("test_accuracy")
        if acc is not None and acc >= target:
            return float(point["train_s"])
    return None
