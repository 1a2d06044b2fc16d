"""End to end over a real OpenSSH server on 127.0.0.1: launch, preflight, Ctrl-C, remote kill."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edgetrain.launch.base import WorkerSpec
from edgetrain.launch.hosts import parse_hosts
from edgetrain.launch.ssh import SshLauncher
from edgetrain.rundir import read_jsonl
from tests.helpers.cli import last_error, plain_errors
from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes
from tests.helpers.sshd import Sshd, sshd  # noqa: F401 - the fixture
from tests.helpers.waiting import wait_until

VENV = Path(sys.executable).parent.parent

RECIPE = """
[run]
name = "ssh"
seed = 1
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
epochs = {epochs}
batch_size = 16
lr = 0.05
[gossip]
probability = 0.3
[[workers]]
count = 2
[[workers]]
count = 1
slowdown = {slowdown}
"""


def _venv_links(tmp_path: Path, n: int) -> list[Path]:
    """``n`` different venv paths, all the test's own venv (each host gets its own path)."""
    links = []
    for i in range(n):
        link = tmp_path / f"venv-{i}"
        link.symlink_to(VENV, target_is_directory=True)
        links.append(link)
    return links


def _hosts_toml(server: Sshd, pythons: list[str], workers: list[int]) -> str:
    opts = ", ".join(json.dumps(o) for o in server.ssh_options)
    text = f"ssh_options = [{opts}]\n"
    for i, (py, n) in enumerate(zip(pythons, workers, strict=True)):
        text += (
            f'\n[[hosts]]\nname = "h{i}"\naddress = "{server.address}"\nport = {server.port}\n'
            f'user = "{server.user}"\nidentity = "{server.identity}"\npython = "{py}"\n'
            f'workers = {n}\nsite = "{"lab" if i < 2 else "field"}"\nlabels = ["l{i}"]\n'
        )
    return text


def _setup(tmp_path: Path, server: Sshd, epochs: int = 4, slowdown: float = 2.0) -> Path:
    (tmp_path / "recipe.toml").write_text(RECIPE.format(epochs=epochs, slowdown=slowdown))
    pythons = [f"{link}/bin/python" for link in _venv_links(tmp_path, 3)]
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(_hosts_toml(server, pythons, [1, 1, 1]))
    return hosts


def _launch(tmp_path: Path, *extra: str, **popen: object) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "edgetrain", "launch", str(tmp_path / "recipe.toml")]
    argv += ["--runs-root", str(tmp_path / "runs"), "--format", "json", *extra]
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        **popen,  # type: ignore[call-overload]
    )


def ssh_clients(port: int) -> dict[int, str]:
    """Live ssh client processes talking to the test server's port."""
    out: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        is_ssh = state != "Z" and argv and Path(argv[0].decode()).name == "ssh"
        if is_ssh and str(port).encode() in argv:
            out[int(entry.name)] = b" ".join(argv).decode(errors="replace")
    return out


def _wait_gone(check: Callable[[], object], timeout: float, what: str) -> None:
    wait_until(lambda: not check(), timeout, f"{what} gone")


def _only_run(runs: Path) -> Path:
    dirs = [p for p in runs.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.mark.timeout(300)
def test_three_workers_over_ssh_each_host_its_own_venv(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    hosts = _setup(tmp_path, sshd)
    proc = _launch(tmp_path, "--hosts", str(hosts))
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["status"] == "completed"
    assert [w["status"] for w in summary["workers"]] == ["completed"] * 3
    assert summary["averaged_test_accuracy"] > 0.8
    run = _only_run(tmp_path / "runs")
    manifest = json.loads((run / "manifest.json").read_text())
    assert [w["host"] for w in manifest["workers"]] == ["h0", "h1", "h2"]
    assert [w["site"] for w in manifest["workers"]] == ["lab", "lab", "field"]
    assert [w["labels"] for w in manifest["workers"]] == [["l0"], ["l1"], ["l2"]]
    assert manifest["hosts"] == ["h0", "h1", "h2"]
    assert (run / "hosts.toml").read_text() == hosts.read_text()
    for i in range(3):
        log = (run / "logs" / f"worker-{i}.log").read_text()
        assert f" w{i} INFO" in log and "@@edgetrain" not in log and not log.startswith("[w")
        epochs = [
            e for e in read_jsonl(run / "metrics" / f"worker-{i}.jsonl") if e["event"] == "epoch"
        ]
        assert [e["epoch"] for e in epochs] == [1, 2, 3, 4]
        # each worker ran under its host's venv path, and its lines streamed prefixed
        assert f"[w{i} h{i}]" in err
    assert edgetrain_processes(manifest["run_id"]) == {}
    assert ssh_clients(sshd.port) == {}


@pytest.mark.timeout(120)
def test_preflight_names_each_failing_host_and_starts_nothing(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    (tmp_path / "recipe.toml").write_text(RECIPE.format(epochs=2, slowdown=1.0))
    link = _venv_links(tmp_path, 1)[0]
    pythons = [f"{link}/bin/python", "/nonexistent/venv/bin/python", "/bin/true"]
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(_hosts_toml(sshd, pythons, [1, 1, 1]))
    proc = _launch(tmp_path, "--hosts", str(hosts))
    out, err = proc.communicate(timeout=90)
    err = plain_errors(err)
    assert proc.returncode == 2, err
    assert "ssh preflight failed on 2 of 3 hosts" in err
    lines = [ln.strip() for ln in err.splitlines()]
    assert any(
        ln.startswith("h1 (127.0.0.1): python '/nonexistent/venv/bin/python' is not an executable")
        for ln in lines
    ), err
    assert any(ln.startswith("h2 (127.0.0.1): the probe under /bin/true printed") for ln in lines)
    assert not any(ln.startswith("h0") for ln in lines)
    assert "Traceback" not in err and out == ""
    assert not (tmp_path / "runs").exists()  # nothing written, nothing started
    assert ssh_clients(sshd.port) == {}


@pytest.mark.timeout(120)
def test_unreachable_host_fails_preflight(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    (tmp_path / "recipe.toml").write_text(RECIPE.format(epochs=2, slowdown=1.0))
    hosts = tmp_path / "hosts.toml"
    text = _hosts_toml(sshd, [sys.executable] * 3, [1, 1, 1])
    hosts.write_text(text.replace(f"port = {sshd.port}", "port = 1", 1))
    proc = _launch(tmp_path, "--hosts", str(hosts))
    _, err = proc.communicate(timeout=90)
    err = plain_errors(err)
    assert proc.returncode == 2, err
    assert "failed on 1 of 3 hosts" in err
    assert "h0 (127.0.0.1): unreachable over ssh:" in err and "Connection refused" in err


@contextlib.contextmanager
def _long_ssh_run(tmp_path: Path, server: Sshd) -> Iterator[tuple[Launch, Path]]:
    hosts = _setup(tmp_path, server, epochs=100_000, slowdown=3.0)
    launch = Launch(tmp_path / "recipe.toml", tmp_path / "runs", "--hosts", str(hosts))
    try:
        launch.wait_epochs(3)
        yield launch, launch.run_dir
    finally:
        launch.kill()


@pytest.mark.timeout(300)
def test_ctrl_c_over_ssh_leaves_no_process_anywhere(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    with _long_ssh_run(tmp_path, sshd) as (launch, run):
        run_id = json.loads((run / "manifest.json").read_text())["run_id"]
        argv0 = [c.split()[0] for c in edgetrain_processes(run_id).values()]
        pythons = [a for a in argv0 if a.endswith("/bin/python")]
        # each remote worker runs under its own host's venv path
        assert sorted(pythons) == [f"{tmp_path}/venv-{i}/bin/python" for i in range(3)]
        launch.signal(signal.SIGINT)  # what a terminal's Ctrl-C does
        code, _ = launch.finish(timeout=90)
    assert code == 130, launch.stderr
    assert "Traceback" not in launch.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    # (the launcher stops every worker before it exits: no waiting should be needed)
    _wait_gone(lambda: edgetrain_processes(run_id), 30, "worker processes")
    _wait_gone(lambda: ssh_clients(sshd.port), 30, "ssh clients")


@pytest.mark.timeout(300)
def test_launcher_sigkill_over_ssh_workers_exit_by_themselves(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    with _long_ssh_run(tmp_path, sshd) as (launch, run):
        run_id = json.loads((run / "manifest.json").read_text())["run_id"]
        launch.signal(signal.SIGKILL)  # the launcher dies, no clean-up code runs
        launch.proc.wait(timeout=30)
    # its ssh clients see their stdin close and pass end of file on; each remote worker reads
    # it and exits, and then its ssh client exits too
    _wait_gone(lambda: edgetrain_processes(run_id), 60, "remote worker processes")
    _wait_gone(lambda: ssh_clients(sshd.port), 30, "ssh clients")


@pytest.mark.timeout(300)
def test_ssh_process_reports_a_remote_kill_and_stops_idempotently(
    tmp_path: Path,
    sshd: Sshd,  # noqa: F811
) -> None:
    """The SshProcess handle alone: a remote SIGKILL shows in poll() promptly; terminate() and
    kill() on a live remote process end it on the host, and repeat harmlessly."""
    hosts = parse_hosts(
        {
            "ssh_options": list(sshd.ssh_options),
            "hosts": [
                {
                    "address": sshd.address,
                    "port": sshd.port,
                    "user": sshd.user,
                    "identity": str(sshd.identity),
                    "workers": 2,
                }
            ],
        },
        "test",
    )
    lines: list[str] = []
    launcher = SshLauncher(hosts, 2, "test", sink=lines.append)
    # a worker that never finds its coordinator: it waits, as a slow-starting real one would
    args = ("worker", "--coordinator", "tcp://127.0.0.1:9", "--worker-id", "0", "--run-id")
    # --no-watch-stdin: only the remote kill (not end of file) can stop these
    specs = [
        WorkerSpec(
            i, "h", (*args, f"sshkill{i}{os.getpid()}", "--no-watch-stdin"), tmp_path / f"w{i}.log"
        )
        for i in range(2)
    ]
    handles = [launcher.start(s) for s in specs]
    try:
        for h in handles:
            _wait_gone(lambda h=h: h.remote_pid is None, 30, "no remote pid")
            _wait_gone(
                lambda h=h: not edgetrain_processes(f"sshkill{h.worker_id}"), 30, "no worker"
            )
        assert all(h.poll() is None for h in handles)
        # SIGKILL the first remote worker behind the launcher's back
        first = edgetrain_processes(f"sshkill0{os.getpid()}")
        py = [p for p, c in first.items() if c.split()[0].endswith("bin/python")]
        os.kill(py[0], signal.SIGKILL)
        assert handles[0].wait(15) == -signal.SIGKILL
        # terminate the second through the handle: gone on the host too
        handles[1].terminate()
        handles[1].terminate()
        assert handles[1].wait(15) is not None
        handles[1].kill()
        _wait_gone(lambda: edgetrain_processes(f"sshkill1{os.getpid()}"), 15, "terminated worker")
    finally:
        for h in handles:
            h.kill()
            h.wait(15)
        launcher.close(15)
    assert ssh_clients(sshd.port) == {}
    assert "@@edgetrain" not in (tmp_path / "w0.log").read_text()


@pytest.mark.timeout(120)
def test_coordinator_port_unreachable_from_hosts_fails_before_workers(
    tmp_path: Path,
    sshd: Sshd,  # noqa: F811
) -> None:
    hosts = _setup(tmp_path, sshd)
    # the coordinator binds 127.0.0.1 but tells the hosts to dial 127.0.0.2: nothing listens
    hosts.write_text('coordinator = "127.0.0.2"\n' + hosts.read_text())
    proc = _launch(tmp_path, "--hosts", str(hosts))
    _, err = proc.communicate(timeout=90)
    err = plain_errors(err)
    assert proc.returncode == 2, err
    assert "ssh preflight failed on 3 of 3 hosts" in err
    assert "h0 (127.0.0.1): cannot reach the coordinator at 127.0.0.2:" in err
    assert "Traceback" not in err
    # no worker was started and nothing is kept: the run directory made for it is gone
    assert list((tmp_path / "runs").iterdir()) == []
    assert ssh_clients(sshd.port) == {}


@pytest.mark.timeout(180)
def test_a_bind_address_the_machine_lacks_is_one_line_exit_2(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    """Review B7: the coordinator's bind (hosts file ``bind``) and a worker's (a host's
    ``bind``) each fail as one line naming the address, exit code 2, manifest failed."""
    hosts = _setup(tmp_path, sshd)
    text = hosts.read_text()
    hosts.write_text('bind = "203.0.113.9"\n' + text)  # TEST-NET-3: no machine has it
    proc = _launch(tmp_path, "--hosts", str(hosts))
    _, err = proc.communicate(timeout=120)
    err = plain_errors(err)
    assert proc.returncode == 2, err
    last = last_error(err)
    assert last.startswith("error: the coordinator cannot bind to address '203.0.113.9'")
    manifest = json.loads((_only_run(tmp_path / "runs") / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "203.0.113.9" in manifest["error"]

    shutil.rmtree(tmp_path / "runs")
    worker_bind = text.replace('name = "h1"\n', 'name = "h1"\nbind = "203.0.113.9"\n')
    hosts.write_text(worker_bind)
    proc = _launch(tmp_path, "--hosts", str(hosts))
    _, err = proc.communicate(timeout=120)
    err = plain_errors(err)
    assert proc.returncode == 2, err
    last = last_error(err)
    assert last.startswith("error: worker 1 (host h1): the gossip inbox of worker 1 cannot bind")
    assert "'203.0.113.9'" in last and "Traceback" not in err
    manifest = json.loads((_only_run(tmp_path / "runs") / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["workers"][1]["status"] == "failed"
    # a remote worker still importing torch when its ssh session closed notices only after
    # (no pty, no SIGHUP): it ends by itself, as the other remote-teardown tests wait for
    run_id = manifest["run_id"]
    _wait_gone(lambda: edgetrain_processes(run_id), 60, "remote worker processes")
    assert ssh_clients(sshd.port) == {}


@pytest.mark.timeout(240)
def test_a_host_named_only_in_an_ssh_config(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    """A hosts file may name hosts as the user's ssh config does: an alias with its own
    HostName, Port, User and IdentityFile; the coordinator and the peers reach what ssh
    resolves it to (``ssh -G``), not a DNS lookup of the alias."""
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host edge-alias\n  HostName {sshd.address}\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.identity}\n  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
    )
    (tmp_path / "recipe.toml").write_text(RECIPE.format(epochs=2, slowdown=1.0))
    link = _venv_links(tmp_path, 1)[0]
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(
        f'ssh_config = "{config}"\n\n[[hosts]]\nname = "edge"\naddress = "edge-alias"\n'
        f'python = "{link}/bin/python"\nworkers = 3\n'
    )
    proc = _launch(tmp_path, "--hosts", str(hosts))
    out, err = proc.communicate(timeout=200)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["status"] == "completed" and summary["test_accuracy"] > 0.5
    manifest = json.loads((_only_run(tmp_path / "runs") / "manifest.json").read_text())
    assert manifest["coordinator"].startswith("tcp://127.0.0.1:")  # the alias' HostName
    assert [w["host"] for w in manifest["workers"]] == ["edge"] * 3
    assert ssh_clients(sshd.port) == {}
