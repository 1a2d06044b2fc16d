"""A real OpenSSH server on 127.0.0.1 for tests: generated keys, a free port, torn down after."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail

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


def _wait_listening(
    port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 20
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"sshd exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    pytest.fail(f"sshd did not listen on port {port} within {timeout} s")


def _check_prerequisites() -> None:
    if not SSHD.is_file() or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        skip_or_fail("OpenSSH server/client not installed (apt-get install openssh-server)")
    if os.geteuid() != 0:
        skip_or_fail("the sshd tests run sshd as root (not root here)")


@contextlib.contextmanager
def running_sshd(tmp: Path) -> Iterator[Sshd]:
    """Start ``sshd -D`` with generated keys on a free 127.0.0.1 port; stop it afterwards."""
    _check_prerequisites()
    tmp.mkdir(parents=True, exist_ok=True)
    host_key, client_key = tmp / "host_key", tmp / "client_key"
    _keygen(host_key)
    _keygen(client_key)
    (tmp / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
    port = _free_port()
    config = tmp / "sshd_config"
    config.write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PermitRootLogin prohibit-password\nPidFile {tmp / 'sshd.pid'}\n"
        "MaxStartups 64:30:128\nMaxSessions 64\n"
    )
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    with (tmp / "sshd.log").open("wb") as log:
        proc = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_listening(port, proc, tmp / "sshd.log")
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
