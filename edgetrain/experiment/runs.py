"""One arm at one seed: a real ``edgetrain launch`` of its recipe into
``OUT/runs/<arm>-s<seed>``. A run whose report says it completed is not run again, so a
reproduction can be stopped and continued in pieces; every recipe is read back by the recipe
loader before it is launched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment.arms import Arm
from edgetrain.experiment.recipes import check_file

STOP_GRACE_S = 120.0
"""How long a stopped launcher may take to stop its workers and write its manifest."""


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
    check_file(recipe)
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
