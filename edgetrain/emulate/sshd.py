"""One OpenSSH server per emulated host: its own host key and config, listening only on the
host's address inside its network namespace, started inside the host's cgroups so that every
session (and every worker) inherits the host's CPU share and memory limit, and sees the
cgroup hierarchies (its own memory peak) as a process on a real host does."""

from __future__ import annotations

import contextlib
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path

from edgetrain.emulate import cgroups
from edgetrain.emulate.topology import HostNode

SSHD = Path("/usr/sbin/sshd")
NETNS_DIR = Path("/run/netns")  # where `ip netns add` names its namespaces
CLIENT_KEY = "id_ed25519"


class SshdError(RuntimeError):
    """An sshd that could not be started."""


def ssh_unavailable() -> str | None:
    if shutil.which("nsenter") is None:
        return "`nsenter` not found; install util-linux (apt-get install util-linux)"
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return (
                f"`{tool}` not found; install the OpenSSH client (apt-get install openssh-client)"
            )
    if not SSHD.is_file():
        return f"{SSHD} not found; install the OpenSSH server (apt-get install openssh-server)"
    return None


def keygen(path: Path, comment: str) -> str:
    """Write an ed25519 key pair at ``path`` (0600); return the public key line."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return Path(f"{path}.pub").read_text().strip()


def host_dir(state: Path, host: str) -> Path:
    return state / "hosts" / host


def write_config(state: Path, host: HostNode) -> Path:
    """The host's key and ``sshd_config``; returns the config's path."""
    d = host_dir(state, host.name)
    d.mkdir(parents=True, exist_ok=True)
    keygen(d / "ssh_host_ed25519_key", f"edgetrain-emulate {host.name}")
    config = d / "sshd_config"
    config.write_text(
        f"ListenAddress {host.address}\nPort 22\nHostKey {d / 'ssh_host_ed25519_key'}\n"
        f"AuthorizedKeysFile {state / 'authorized_keys'}\nPidFile {d / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\nX11Forwarding no\n"
        "AllowTcpForwarding no\nMaxStartups 64:30:128\nMaxSessions 64\n"
        "ClientAliveInterval 15\nClientAliveCountMax 4\n"
    )
    return config


def start(state: Path, testbed: str, host: HostNode, timeout: float = 20.0) -> int:
    """Start the host's sshd in its cgroups and namespace; wait until it accepts; return its pid."""
    d = host_dir(state, host.name)
    config = write_config(state, host)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation directory
    groups = [cgroups.cpu_dir(testbed, host.name)]
    if host.memory is not None:
        groups.append(cgroups.memory_dir(testbed, host.name))
    join = "; ".join(f"echo $$ > {shlex.quote(str(g / 'cgroup.procs'))}" for g in groups)
    # Only the network namespace: `ip netns exec` would also remount /sys, which hides the
    # cgroup hierarchies, so a worker could not read its own host's memory peak and limit.
    argv = ["nsenter", f"--net={NETNS_DIR / host.ns}", str(SSHD), "-f", str(config)]
    argv += ["-E", str(d / "sshd.log")]
    script = f"{join} && exec {' '.join(shlex.quote(a) for a in argv)}"
    done = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        log = _tail(d / "sshd.log") or (done.stderr or done.stdout).strip()
        raise SshdError(f"sshd for host {host.name} did not start: {log}")
    pid = _wait_pid(d / "sshd.pid", timeout)
    _wait_listening(host, timeout)
    return pid


def _tail(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = path.read_text().strip().splitlines()
        return lines[-1] if lines else ""
    return ""


def _wait_pid(path: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            return int(path.read_text().strip())
        time.sleep(0.02)
    raise SshdError(f"sshd wrote no pid file {path} within {timeout:g} s")


def _wait_listening(host: HostNode, timeout: float) -> None:
    """sshd listens inside the namespace; the root namespace reaches it through the gateway."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host.address, 22), 1.0) as s:
                s.settimeout(2.0)
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError as exc:
            last = str(exc)
        time.sleep(0.05)
    raise SshdError(f"sshd of host {host.name} not reachable at {host.address}:22: {last}")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped by init, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def read_pid(state: Path, host: str) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int((host_dir(state, host) / "sshd.pid").read_text().strip())
    return None


def known_hosts_line(state: Path, host: HostNode) -> str:
    key = (host_dir(state, host.name) / "ssh_host_ed25519_key.pub").read_text().split()
    return f"{host.address} {key[0]} {key[1]}"
