"""``edgetrain runs``, ``status`` and ``logs`` (issue 30): on real digits runs (one completed,
followed by ``logs -f`` while it ran; one stopped mid-training, then its launcher killed) and on
run directories written by hand (an unreadable manifest, a live run's log being followed)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import last_error, run_cli
from tests.helpers.launching import Launch
from tests.helpers.paths import RECIPES, REPO


def _recipe(tmp: Path, epochs: int, name: str) -> Path:
    """recipes/quickstart.toml (4 digits workers) with fewer epochs and its own name."""
    text = (RECIPES / "quickstart.toml").read_text()
    text = text.replace("epochs = 30", f"epochs = {epochs}").replace(
        'name = "quickstart"', f'name = "{name}"'
    )
    assert f"epochs = {epochs}" in text
    path = tmp / f"{name}.toml"
    path.write_text(text)
    return path


class Follow:
    """``edgetrain logs RUN -f`` in a subprocess, its stdout read line by line on a thread."""

    def __init__(self, run: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edgetrain", "logs", str(run), "-f", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_line(self, text: str, timeout: float = 60) -> None:
        """Block until a printed line contains ``text``."""
        while not any(text in line for line in self.lines):
            try:
                line = self._queue.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"logs -f printed no line with {text!r} within {timeout:g} s")
            if line is None:
                pytest.fail(f"logs -f ended before printing {text!r}: {self.lines}")
            self.lines.append(line)

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        """Its exit code and stderr, once it exited by itself (killed and failed otherwise)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"logs -f did not exit within {timeout:g} s")
        while (line := self._queue.get(timeout=30)) is not None:
            self.lines.append(line)
        assert self.proc.stderr is not None
        return self.proc.returncode, self.proc.stderr.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def followed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A completed 2-epoch quickstart run, and what ``logs -f`` printed while following it
    from its first event to its end."""
    tmp = tmp_path_factory.mktemp("followed")
    launch = Launch(_recipe(tmp, 2, "watched"), tmp / "runs")
    follow: Follow | None = None
    try:
        run = launch.run_dir  # the first event: the run has just begun
        follow = Follow(run)
        code, summary = launch.finish(timeout=200)
        assert code == 0, launch.stderr
        assert summary is not None and summary["status"] == "completed"
        follow_code, follow_err = follow.finish(timeout=120)
    finally:
        launch.kill()
        if follow is not None:
            follow.kill()
    return {
        "run": run,
        "root": tmp / "runs",
        "summary": summary,
        "code": follow_code,
        "err": follow_err,
        "lines": follow.lines,
    }


@pytest.mark.timeout(300)
def test_logs_follow_a_real_run_until_it_ends(followed: dict[str, Any]) -> None:
    assert followed["code"] == 0, followed["err"]
    assert "Traceback" not in followed["err"]
    lines: list[str] = followed["lines"]
    for w in range(4):
        mine = [line for line in lines if line.startswith(f"worker {w} | ")]
        assert mine, f"no line of worker {w} in {lines}"
        assert any("training samples" in line for line in mine)
    log = (followed["run"] / "logs" / "worker-2.log").read_text().splitlines()
    assert [line for line in lines if line.startswith("worker 2 | ")] == [
        f"worker 2 | {line}" for line in log
    ]


@pytest.mark.timeout(300)
def test_logs_prints_every_worker_or_one(
    followed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "logs", str(followed["run"]))
    assert code == 0
    assert {line.split(" | ")[0] for line in out.splitlines()} == {f"worker {w}" for w in range(4)}
    code, out, _ = run_cli(capsys, "logs", str(followed["run"]), "--worker", "3")
    assert code == 0 and out
    assert all(line.startswith("worker 3 | ") for line in out.splitlines())


@pytest.mark.timeout(300)
def test_runs_lists_a_completed_run(
    followed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    (followed["root"] / "not-a-run").mkdir(exist_ok=True)  # no manifest: skipped
    code, out, _ = run_cli(capsys, "runs", "--runs-root", str(followed["root"]), "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 1
    row = rows[0]
    assert row["name"] == "watched" and row["status"] == "completed"
    assert (row["family"], row["technique"]) == ("gossip", "gosgd")
    assert (row["epochs_done"], row["epochs"]) == (2, 2)
    assert row["test_accuracy"] == pytest.approx(followed["summary"]["test_accuracy"])
    assert row["wall_s"] > 0 and Path(row["path"]) == followed["run"]
    code, out, _ = run_cli(capsys, "runs", "--runs-root", str(followed["root"]))
    assert code == 0
    assert "watched" in out and "completed" in out and "gossip/gosgd" in out and "2/2" in out


@pytest.mark.timeout(300)
def test_status_of_a_completed_run(
    followed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "status", str(followed["run"]), "--format", "json")
    assert code == 0
    s = json.loads(out)
    assert s["status"] == "completed" and s["phase"] == "done"
    assert [w["id"] for w in s["workers"]] == [0, 1, 2, 3]
    for w in s["workers"]:
        assert (w["role"], w["host"], w["epoch"]) == ("trainer", "localhost", 2)
        assert w["loss"] > 0 and 0 < w["test_accuracy"] <= 1
        assert w["reported_s_ago"] >= 0
    code, out, _ = run_cli(capsys, "status", str(followed["run"]))
    assert code == 0 and "done (completed)" in out and "localhost" in out


def _kill_workers(manifest: dict[str, Any]) -> None:
    for w in manifest.get("workers", []):
        if isinstance(w.get("pid"), int):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(w["pid"], signal.SIGKILL)


@pytest.mark.timeout(300)
def test_a_run_in_progress_then_its_launcher_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stopped (SIGSTOP) once every worker ended epoch 1, the launcher writes nothing while
    status reads the run; killed, it leaves a manifest that still says running."""
    launch = Launch(_recipe(tmp_path, 30, "live"), tmp_path / "runs")
    manifest: dict[str, Any] = {}
    try:
        launch.wait_epochs(4, epoch=1)
        manifest = launch.manifest()
        assert manifest["launcher_pid"] == launch.proc.pid
        launch.signal(signal.SIGSTOP)
        run = launch.run_dir
        code, out, _ = run_cli(capsys, "status", str(run), "--format", "json")
        assert code == 0
        s = json.loads(out)
        assert s["status"] == "running"
        assert s["phase"].startswith("training epoch ") and s["phase"].endswith(" of 30")
        for w in s["workers"]:
            assert w["epoch"] >= 1 and w["loss"] is not None and w["reported_s_ago"] >= 0
            assert w["state"] == "training"
        code, out, _ = run_cli(capsys, "runs", "--runs-root", str(tmp_path / "runs"), "-f", "json")
        assert code == 0
        [row] = json.loads(out)
        assert row["status"] == "running" and row["epochs_done"] >= 1 and row["epochs"] == 30
        launch.kill()  # SIGKILL: the manifest keeps saying running
        assert json.loads((run / "manifest.json").read_text())["status"] == "running"
        code, out, _ = run_cli(capsys, "runs", "--runs-root", str(tmp_path / "runs"), "-f", "json")
        [row] = json.loads(out)
        assert row["status"] == "interrupted"
        assert f"pid {launch.proc.pid}" in row["reason"]
        code, out, _ = run_cli(capsys, "status", str(run), "--format", "json")
        assert json.loads(out)["phase"] == "done"
        follow = Follow(run)  # the run is over: -f prints what there is and exits
        assert follow.finish(timeout=60)[0] == 0
        assert any(line.startswith("worker 0 | ") for line in follow.lines)
    finally:
        launch.kill()
        _kill_workers(manifest)


def _fake_run(root: Path, name: str, status: str = "running", pid: int | None = None) -> Path:
    """A run directory written by hand: two workers, a launcher ``pid`` on this host."""
    run = root / name
    (run / "logs").mkdir(parents=True)
    (run / "metrics").mkdir()
    manifest = {
        "run_id": "r1",
        "name": name,
        "status": status,
        "error": None,
        "family": "gossip",
        "technique": "gosgd",
        "start_time": "2026-11-20T10:00:00+00:00",
        "end_time": None,
        "wall_s": None,
        "launcher_host": socket.gethostname(),
        "launcher_pid": os.getpid() if pid is None else pid,
        "recipe": {"train": {"epochs": 5}},
        "workers": [
            {"id": 0, "role": "trainer", "host": "localhost", "pid": None, "status": "pending"},
            {"id": 1, "role": "trainer", "host": "localhost", "pid": None, "status": "pending"},
        ],
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def _set_status(run: Path, status: str) -> None:
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["status"] = status
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest))
    tmp.replace(path)


def _append(path: Path, text: str) -> None:
    with path.open("a") as fh:
        fh.write(text)


def test_runs_skips_non_runs_and_lists_unreadable_manifests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_run(tmp_path, "alive")
    (tmp_path / "plans-only").mkdir()
    (tmp_path / "stray.txt").write_text("x")
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _fake_run(tmp_path, "orphan", pid=dead.pid)
    code, out, err = run_cli(capsys, "runs", "--runs-root", str(tmp_path), "--format", "json")
    assert code == 0, err
    rows = {Path(r["path"]).name: r for r in json.loads(out)}
    assert set(rows) == {"alive", "broken", "orphan"}
    assert rows["alive"]["status"] == "running" and rows["alive"]["epochs"] == 5
    assert rows["orphan"]["status"] == "interrupted"
    assert rows["broken"]["status"] == "unreadable" and "manifest.json" in rows["broken"]["reason"]
    code, out, err = run_cli(capsys, "runs", "--runs-root", str(tmp_path))
    assert code == 0 and "unreadable" in out and "Traceback" not in out + err


def test_status_phases_of_a_run_in_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _fake_run(tmp_path, "phases")

    def phase() -> str:
        code, out, _ = run_cli(capsys, "status", str(run), "--format", "json")
        assert code == 0
        return str(json.loads(out)["phase"])

    assert phase() == "starting"
    for w in (0, 1):
        _append(
            run / "metrics" / f"worker-{w}.jsonl",
            json.dumps({"event": "registered", "worker": w, "run_id": "r1", "host": "h"}) + "\n",
        )
    _append(run / "metrics" / "coordinator.jsonl", '{"event":"started","run_id":"r1","t":1}\n')
    assert phase() == "training epoch 1 of 5"
    row = {"event": "epoch", "epoch": 2, "loss": 0.5, "test_accuracy": 0.75, "t": 2}
    _append(run / "metrics" / "worker-0.jsonl", json.dumps({**row, "worker": 0}) + "\n")
    assert phase() == "training epoch 3 of 5"
    code, out, _ = run_cli(capsys, "status", str(run), "--format", "json")
    w0, w1 = json.loads(out)["workers"]
    assert (w0["host"], w0["state"], w0["epoch"], w0["loss"], w0["test_accuracy"]) == (
        "h",
        "training",
        2,
        0.5,
        0.75,
    )
    assert (w1["state"], w1["epoch"]) == ("registered", None)
    _append(run / "metrics" / "coordinator.jsonl", '{"event":"draining","t":3}\n')
    assert phase() == "draining"
    _set_status(run, "completed")
    assert phase() == "done"


@pytest.mark.timeout(120)
def test_logs_follow_until_the_manifest_says_the_run_ended(tmp_path: Path) -> None:
    run = _fake_run(tmp_path, "tail")
    log0, log1 = run / "logs" / "worker-0.log", run / "logs" / "worker-1.log"
    log0.write_text("zero first\n")
    follow = Follow(run)
    try:
        follow.wait_line("worker 0 | zero first")
        _append(log1, "one appeared\n")  # a log that did not exist when -f began
        follow.wait_line("worker 1 | one appeared")
        _append(log0, "zero half")  # an unfinished line waits for its end
        _append(log0, " done\nzero last")
        follow.wait_line("worker 0 | zero half done")
        _set_status(run, "completed")
        code, err = follow.finish(timeout=60)
    finally:
        follow.kill()
    assert code == 0, err
    assert follow.lines[-1] == "worker 0 | zero last"  # the rest is printed at the end


@pytest.mark.timeout(120)
def test_logs_follow_stops_on_ctrl_c_without_a_traceback(tmp_path: Path) -> None:
    run = _fake_run(tmp_path, "sigint")
    (run / "logs" / "worker-0.log").write_text("hello\n")
    follow = Follow(run, "--worker", "0")
    try:
        follow.wait_line("worker 0 | hello")
        follow.proc.send_signal(signal.SIGINT)
        code, err = follow.finish(timeout=60)
    finally:
        follow.kill()
    assert code == 130
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["status", "{tmp}/nowhere"], "run directory '{tmp}/nowhere' not found"),
        (["status", "{tmp}"], "is not an edgetrain run directory"),
        (["logs", "{tmp}"], "is not an edgetrain run directory"),
        (["logs", "{tmp}/r", "--worker", "7"], "has no worker 7; pass --worker N with N in 0..1"),
        (["runs", "--runs-root", "{tmp}/nowhere"], "--runs-root '{tmp}/nowhere' not found"),
        (["runs", "--runs-root", "{tmp}/r/manifest.json"], "is not a directory"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    _fake_run(tmp_path, "r")
    code, out, err = run_cli(capsys, *[a.format(tmp=tmp_path) for a in argv])
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert expected.format(tmp=tmp_path) in last_error(err)


def test_runs_without_a_runs_directory_says_how_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(capsys, "runs")
    assert code == 0 and "no runs under runs/" in out
    code, out, _ = run_cli(capsys, "runs", "--format", "json")
    assert code == 0 and json.loads(out) == []


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in ("runs", "status", "logs"):
        code, out, _ = run_cli(capsys, cmd, "--help")
        assert code == 0 and f"edgetrain {cmd}" in out and "Example" in out
