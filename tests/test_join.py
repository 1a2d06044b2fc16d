"""``edgetrain join RUN --worker ID [-H HOST]`` (issue 31, item 1): the launcher's verdict on a
join request (literal table), the request files, the command's refusals (one line, exit 2,
nothing left), and a real gossip run without ``[run] restart`` where a worker killed with
SIGKILL is started again by ``edgetrain join``, takes the live model from a peer and finishes
the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from edgetrain.launch.join import (
    JoinRequest,
    answer_path,
    control_dir,
    parse_request,
    request_path,
    take_requests,
    verdict,
    write_answer,
    write_request,
)
from edgetrain.launch.restart import RestartBook
from tests.helpers.cli import last_error, run_cli
from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes, kill_all
from tests.helpers.rejoining import (
    gated_env,
    rejoined_epoch,
    run_command,
    ssh_launch,
    worker_pid,
)
from tests.helpers.sshd import Sshd, sshd  # noqa: F401 - the fixture

REPO = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------ the verdict (pure)

OK: dict[str, Any] = {
    "rejoins": True,
    "what": "gossip/gosgd",
    "phase": "training",
    "status": "failed",
    "error_kind": "error",
    "mending": False,
    "running": False,
    "host": None,
    "hosts": ("a", "b"),
    "path": "runs/r",
}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({}, None),
        ({"host": "b"}, None),
        ({"rejoins": False}, "a gossip/gosgd worker cannot rejoin a running run yet"),
        ({"phase": "draining"}, "the run is draining, not training"),
        ({"status": "training"}, "worker 2 is in the run (training)"),
        ({"status": "pending"}, "worker 2 is in the run (pending)"),
        ({"error_kind": "input"}, "worker 2 was lost for good (input)"),
        ({"error_kind": "late"}, "worker 2 was lost for good (late)"),
        ({"mending": True}, "worker 2 is being restarted already"),
        ({"running": True}, "worker 2's lost process has not exited yet"),
        ({"host": "c"}, "host 'c' is not one of the run's hosts (a, b)"),
    ],
)
def test_join_verdicts(change: dict[str, Any], reason: str | None) -> None:
    refusal = verdict(2, **{**OK, **change})
    if reason is None:
        assert refusal is None
    else:
        assert refusal is not None and refusal.reason.startswith(reason), refusal
        assert refusal.fix


def test_a_join_is_outside_the_restart_budget() -> None:
    book = RestartBook(0)
    assert book.schedule(1, 0.0) is None  # no restarts at all
    assert book.joined(1) == 1
    assert book.mending == {1} and book.attempt(1) == 0
    assert book.joined(1) == 2
    book.back(1)  # it re-entered: a later loss is a new failure
    assert book.mending == set()


# ------------------------------------------------------------------ request files


def test_a_request_is_taken_once_and_answered(tmp_path: Path) -> None:
    req = write_request(tmp_path, 2, "b")
    assert json.loads(request_path(tmp_path, 2).read_text())["host"] == "b"
    from edgetrain.errors import EdgetrainError

    with pytest.raises(EdgetrainError, match="already waiting"):
        write_request(tmp_path, 2, None)
    assert take_requests(tmp_path, 3) == [req]
    assert take_requests(tmp_path, 3) == []
    write_answer(tmp_path, req, {"accepted": True})
    assert json.loads(answer_path(tmp_path, 2).read_text())["nonce"] == req.nonce


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"worker": 1, "nonce": "ab"}',  # another worker's
        '{"worker": 2}',
        '{"worker": 2, "nonce": 7}',
        '{"worker": 2, "nonce": "ab", "host": ""}',
        '{"worker": 2, "nonce": "ab", "host": 3}',
        '{"worker": 2, "nonce": "' + "x" * 65 + '"}',
        '{"worker": true, "nonce": "ab"}',
    ],
)
def test_what_is_not_a_request_is_dropped(tmp_path: Path, text: str) -> None:
    assert parse_request(text, 2) is None
    control_dir(tmp_path).mkdir()
    request_path(tmp_path, 2).write_text(text)
    assert take_requests(tmp_path, 3) == []
    assert not request_path(tmp_path, 2).exists()


def test_an_oversized_request_is_dropped_unread(tmp_path: Path) -> None:
    control_dir(tmp_path).mkdir()
    request_path(tmp_path, 0).write_text('{"worker": 0, "nonce": "ab"}' + " " * 5000)
    assert take_requests(tmp_path, 1) == []
    assert parse_request('{"worker": 0, "nonce": "ab"}', 0) == JoinRequest(0, None, "ab")


# ------------------------------------------------------------------ the command's refusals


def _run_dir(tmp_path: Path, **manifest: Any) -> Path:
    run = tmp_path / "run"
    (run / "metrics").mkdir(parents=True)
    base = {
        "run_id": "r1",
        "status": "running",
        "family": "gossip",
        "technique": "gosgd",
        "launcher_pid": os.getpid(),
        "workers": [{"id": i} for i in range(3)],
    }
    (run / "manifest.json").write_text(json.dumps({**base, **manifest}))
    return run


@pytest.mark.parametrize(
    ("manifest", "argv", "message"),
    [
        ({"status": "completed"}, [], "is completed: a worker joins only a running run"),
        ({"launcher_pid": 2**22 + 12345}, [], "is interrupted: a worker joins only"),
        ({"launcher_host": "elsewhere"}, [], "launcher runs on host elsewhere"),
        ({}, ["--worker", "3"], "worker 3 is not in the run (it has workers 0-2)"),
        ({}, ["--worker", "-1"], "worker -1 is not in the run"),
        ({}, ["--wait-s", "0"], "--wait-s 0.0 is not a positive number"),
        ({}, ["--wait-s", "nan"], "--wait-s nan is not a positive number"),
    ],
)
def test_join_refusals_are_one_line_exit_2_and_leave_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    manifest: dict[str, Any],
    argv: list[str],
    message: str,
) -> None:
    run = _run_dir(tmp_path, **manifest)
    before = sorted(p.name for p in run.rglob("*"))
    args = ["--worker", "2", *argv] if "--worker" not in argv else argv
    code, _, err = run_cli(capsys, "join", str(run), *args)
    assert code == 2, err
    assert message in last_error(err), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in run.rglob("*")) == before


def test_a_join_nobody_answers_times_out_and_takes_its_request_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_dir(tmp_path)  # "running", its launcher (this process) never answers
    code, _, err = run_cli(capsys, "join", str(run), "--worker", "1", "--wait-s", "0.3")
    assert code == 2
    assert "the run's launcher did not answer within 0.3 s" in last_error(err)
    assert not control_dir(run).exists()


def test_a_missing_run_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "join", str(tmp_path / "nope"), "--worker", "0")
    assert code == 2 and "not found" in last_error(err)


# ------------------------------------------------------------------ a real run

RECIPE = """
[run]
name = "join"
seed = 5
heartbeat_s = 0.5
checkpoint_every = 0
max_failed_fraction = 0.5
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
epochs = 40
batch_size = 16
[gossip]
probability = 0.3
[[workers]]
count = 3
"""


def _join(run: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_command("join", run, *argv)


@pytest.mark.timeout(300)
def test_a_killed_worker_joins_again_by_edgetrain_join(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE)  # no [run] restart: the launcher leaves a lost worker lost
    env, gate = gated_env(tmp_path)
    launch = Launch(recipe, tmp_path / "runs", env=env)
    run_id = ""
    try:
        launch.wait_epochs(3, epoch=2, timeout=180)
        run, run_id = launch.run_dir, launch.manifest()["run_id"]
        live = _join(run, "--worker", "1")
        assert live.returncode == 2, live.stderr
        assert "worker 1 is in the run" in live.stderr
        os.kill(launch.pids()[2], signal.SIGKILL)
        launch.wait_event(lambda r: r.get("event") == "failed" and r.get("worker") == 2, 30,
                          "worker 2 is lost")  # fmt: skip
        elsewhere = _join(run, "--worker", "2", "-H", "no-such-host")
        assert elsewhere.returncode == 2 and "is not one of the run's hosts" in elsewhere.stderr
        done = _join(run, "--worker", "2")
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["accepted"] is True and answer["worker"] == 2 and answer["pid"] > 0
        restarted = launch.wait_event(
            lambda r: r.get("event") == "restarted" and r.get("worker") == 2, 30, "restarted"
        )
        assert restarted["by"] == "join"
        first = rejoined_epoch(launch, 2, 120)
        gate.touch()
        code, summary = launch.finish(timeout=200)
    finally:
        gate.touch()
        launch.kill()
        if run_id:
            kill_all(edgetrain_processes(run_id))
    assert code == 0, launch.stderr[-3000:]
    assert summary is not None and summary["status"] == "completed"
    assert edgetrain_processes(run_id) == {}
    assert first["rejoin"]["source"] == "peer", first["rejoin"]
    manifest = json.loads((run / "manifest.json").read_text())
    assert [w["status"] for w in manifest["workers"]] == ["completed"] * 3
    assert manifest["workers"][2]["joins"] == 1
    events = [(m["worker"], m["event"], m.get("by")) for m in manifest["membership"]]
    assert events == [
        (2, "left", None),
        (2, "restarted", "join"),
        (2, "rejoining", None),
        (2, "joined", None),
    ]
    assert "by edgetrain join" in (run / "report" / "summary.md").read_text()
    assert not request_path(run, 2).exists() and not answer_path(run, 2).exists()


# ------------------------------------------------------------------ over ssh, onto another host


@pytest.mark.timeout(300)
def test_a_worker_killed_on_its_ssh_host_joins_again_on_another(
    tmp_path: Path,
    sshd: Sshd,  # noqa: F811
) -> None:
    launch, gate = ssh_launch(tmp_path, sshd, "max_failed_fraction = 0.5")
    run_id = ""
    try:
        launch.wait_epochs(3, epoch=2, timeout=180)
        run, run_id = launch.run_dir, launch.manifest()["run_id"]
        os.kill(worker_pid(run_id, 2), signal.SIGKILL)  # on its host, behind the launcher's back
        launch.wait_event(lambda r: r.get("event") == "failed" and r.get("worker") == 2, 60,
                          "worker 2 is lost")  # fmt: skip
        done = _join(run, "--worker", "2", "-H", "h0")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["host"] == "h0"
        first = rejoined_epoch(launch, 2, 120)
        gate.touch()
        code, summary = launch.finish(timeout=200)
    finally:
        gate.touch()
        launch.kill()
        if run_id:
            kill_all(edgetrain_processes(run_id))
    assert code == 0, launch.stderr[-3000:]
    assert summary is not None and summary["status"] == "completed"
    assert first["rejoin"]["source"] == "peer"
    manifest = json.loads((run / "manifest.json").read_text())
    assert [w["status"] for w in manifest["workers"]] == ["completed"] * 3
    assert manifest["workers"][2]["host"] == "h0"
    assert ("2", "restarted", "h0") in {
        (str(m["worker"]), m["event"], m.get("host")) for m in manifest["membership"]
    }
    assert edgetrain_processes(run_id) == {}
