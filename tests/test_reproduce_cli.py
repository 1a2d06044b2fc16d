"""What every reproduction script shares: how it ends on an error and on Ctrl-C."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from edgetrain.errors import EdgetrainError
from edgetrain.experiment import cli
from tests.helpers.procs import edgetrain_processes, kill_all
from tests.helpers.waiting import wait_until


def _parser() -> argparse.ArgumentParser:
    return cli.parser("paper", "doc", quick="q", smoke="s", seeds=2)


def test_ctrl_c_is_one_line_naming_the_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> dict[str, Any]:
        raise KeyboardInterrupt

    code = cli.run(_parser(), ["--out", str(tmp_path / "out")], interrupted)
    err = capsys.readouterr().err
    assert code == 130
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(tmp_path / "out") in err and "resume" in err


def test_an_error_is_one_line_and_its_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    def failing(args: argparse.Namespace) -> dict[str, Any]:
        raise EdgetrainError("the pilot diverged", "lower the learning rate")

    code = cli.run(_parser(), [], failing)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: the pilot diverged") and "Traceback" not in err


LONG_RECIPE = """
[run]
name = "long"
seed = {seed}
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
epochs = 100000
batch_size = 16
lr = 0.05
[gossip]
probability = 0.3
[[workers]]
count = 2
"""

DRIVER = """
import sys
from pathlib import Path
from edgetrain.experiment import runs
runs.run_arm(Path(sys.argv[1]), runs.Arm("long", sys.argv[2]), 1)
"""


@pytest.mark.timeout(240)
def test_ctrl_c_during_a_run_lets_the_launcher_mark_it_interrupted(tmp_path: Path) -> None:
    """SIGINT to the reproduction alone (``kill -INT``, or a terminal's Ctrl-C, which the
    launcher in its own session does not see): the launcher is passed one SIGTERM and waited
    for, so the run's manifest says ``interrupted`` and no worker outlives it."""
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(out), LONG_RECIPE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    run = out / "runs" / "long-s1"
    try:
        wait_until(
            lambda: any(
                (run / "metrics" / f"worker-{w}.jsonl").is_file()
                and (run / "metrics" / f"worker-{w}.jsonl").stat().st_size > 0
                for w in (0, 1)
            ),
            120,
            "a worker writes its first metrics",
        )
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        kill_all(edgetrain_processes(str(run)))  # the launcher has a session of its own
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted", manifest["status"]
    assert {w["status"] for w in manifest["workers"]} == {"interrupted"}
    assert edgetrain_processes(manifest["run_id"]) == {}
    assert edgetrain_processes(str(run)) == {}


SCRIPT = """
import sys
from pathlib import Path
from edgetrain.experiment import cli, runs

def reproduce(args):
    runs.run_arm(args.out, runs.Arm("long", sys.argv[1]), 1)
    return {}

ap = cli.parser("paper", "doc", quick="q", smoke="s", seeds=1)
raise SystemExit(cli.run(ap, sys.argv[2:], reproduce))
"""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `nohup CMD &` from a script starts it


@pytest.mark.timeout(240)
def test_sigterm_stops_a_background_reproduction_as_ctrl_c_does(tmp_path: Path) -> None:
    """A reproduction started in the background ignores SIGINT; SIGTERM to it stops it the
    way Ctrl-C does: the launch is stopped and marked interrupted, no worker outlives it, and
    the script says in one line how to resume (exit 130)."""
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, LONG_RECIPE, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_ignore_sigint,
    )
    run = out / "runs" / "long-s1"
    try:
        wait_until(
            lambda: any(
                (run / "metrics" / f"worker-{w}.jsonl").is_file()
                and (run / "metrics" / f"worker-{w}.jsonl").stat().st_size > 0
                for w in (0, 1)
            ),
            120,
            "a worker writes its first metrics",
        )
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        kill_all(edgetrain_processes(str(run)))
    assert proc.returncode == 130, err
    assert err.startswith("interrupted:") and "resume" in err and "Traceback" not in err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted", manifest["status"]
    assert edgetrain_processes(manifest["run_id"]) == {}
    assert edgetrain_processes(str(run)) == {}


def test_ctrl_c_while_a_testbed_comes_up_still_brings_it_down(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ctrl-C during ``emulate up --verify`` (a minute of link and CPU probes) kills it
    half-way; the testbed's ``down`` must still run, or its namespaces, sshd servers and probes
    outlive the reproduction (seen in a Mercury run stopped at the 10 Mbit/s bring-up)."""
    from edgetrain.experiment import testbed

    calls: list[tuple[str, ...]] = []

    def fake(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        calls.append(args[:2])
        if args[1] == "up":
            raise KeyboardInterrupt
        return subprocess.CompletedProcess(list(args), 0, "", "")

    monkeypatch.setattr(testbed, "_edgetrain", fake)
    monkeypatch.setattr(testbed.os, "geteuid", lambda: 0)
    with pytest.raises(KeyboardInterrupt), testbed.testbed(tmp_path / "bed.toml", "bed"):
        pytest.fail("the block must not run when the testbed never came up")
    assert calls == [("emulate", "down"), ("emulate", "up"), ("emulate", "down")]


@pytest.mark.parametrize("paper", ["dynacomm", "edgegossip", "dlion", "mercury", "mcpipe"])
def test_a_missing_data_root_is_one_line_and_leaves_no_out_directory(
    paper: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib

    main = importlib.import_module(f"reproductions.{paper}").main
    out = tmp_path / "out"
    code = main(["--data-root", str(tmp_path / "missing"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()
