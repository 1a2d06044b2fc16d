"""A real OpenSSH server on 127.0.0.1 for tests: generated keys, a free port, torn down after."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.skips import skip_or_fail
from tests.helpers.waiting import wait_until

SSHD = Path("/usr/sbin/sshd")


@dataclass(frozen=True)
class Sshd:
    """How to reach the test server."""

    address: str
    port: int
    identity: Path
    user: str
    ssh_options: tuple[str, ...] = (
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
    )

    def ssh(self, *remote: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run ``remote`` on the server with the system ssh client."""
        argv = ["ssh", "-o", "BatchMode=yes", "-p", str(self.port), "-i", str(self.identity)]
        argv += ["-l", self.user, *self.ssh_options, self.address, *remote]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )


def _banner(port: int) -> bytes:
    """The first bytes a server on ``port`` says (b"" if nothing answers)."""
    try:
        with socket.create_connection(("127.0.0.1", port), 0.5) as conn:
            conn.settimeout(2)
            return conn.recv(64)
    except OSError:
        return b""


def _listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 20) -> bool:
    """True once our sshd answers on ``port`` with an OpenSSH banner; False if it exited
    (another process took the port between our pick and its bind)."""

    def ready() -> str:
        if proc.poll() is not None:
            return "exited"
        return "ok" if _banner(port).startswith(b"SSH-2.0-OpenSSH") else ""

    return wait_until(ready, timeout, f"sshd answers on port {port}") == "ok"


def _check_prerequisites() -> None:
    if not SSHD.is_file() or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        skip_or_fail("OpenSSH server/client not installed (apt-get install openssh-server)")
    if os.geteuid() != 0:
        skip_or_fail("the sshd tests run sshd as root (not root here)")


def _start(tmp: Path, port: int, host_key: Path) -> subprocess.Popen[bytes]:
    config = tmp / "sshd_config"
    config.write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PermitRootLogin prohibit-password\nPidFile {tmp / 'sshd.pid'}\n"
        "MaxStartups 64:30:128\nMaxSessions 64\n"
    )
    with (tmp / "sshd.log").open("ab") as log:
        return subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@contextlib.contextmanager
def running_sshd(tmp: Path) -> Iterator[Sshd]:
    """Start ``sshd -D`` with generated keys on a free 127.0.0.1 port; stop it afterwards."""
    _check_prerequisites()
    tmp.mkdir(parents=True, exist_ok=True)
    host_key, client_key = tmp / "host_key", tmp / "client_key"
    _keygen(host_key)
    _keygen(client_key)
    (tmp / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    # sshd cannot announce a port: pick a free one, and if another process takes it before
    # sshd binds (sshd then exits: "Bind to port ... failed"), pick again
    for _attempt in range(5):
        port = _free_port()
        proc = _start(tmp, port, host_key)
        if _listening(port, proc):
            break
        proc.wait(10)
    else:
        pytest.fail(
            f"sshd could not bind a port in 5 tries: {(tmp / 'sshd.log').read_text()[-2000:]}"
        )
    try:
        yield Sshd("127.0.0.1", port, client_key, "root")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    with running_sshd(tmp_path / "sshd") as server:
        yield server
