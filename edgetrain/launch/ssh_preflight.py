"""Check every host over ssh, in parallel, before a worker starts: one clear line per failure."""

from __future__ import annotations

import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import edgetrain
from edgetrain.launch.hosts import Host, HostsError, HostsFile
from edgetrain.launch.jetson import python_problem
from edgetrain.launch.ssh_argv import ssh_command

# Runs on the host under its python: reports its Python and edgetrain versions and, given
# ADDR PORT, whether a TCP connection to the coordinator opens from there.
_PROBE = """
import socket, sys
print("@@python", "%d.%d.%d" % tuple(sys.version_info[:3]))
try:
    import edgetrain
except Exception as exc:
    print("@@import-failed", type(exc).__name__, exc)
    sys.exit(0)
print("@@version", edgetrain.__version__)
if len(sys.argv) > 3:
    try:
        socket.create_connection((sys.argv[2], int(sys.argv[3])), 5).close()
        print("@@port-ok")
    except OSError as exc:
        print("@@port-failed", exc)
"""


class PreflightError(HostsError):
    """One or more hosts cannot run the workers."""


def endpoint_target(endpoint: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` -> (HOST, PORT)."""
    parts = urlsplit(endpoint)
    if parts.hostname is None or parts.port is None:
        raise HostsError(f"coordinator endpoint '{endpoint}' has no host:port")
    return parts.hostname, parts.port


def probe_script(python: str, workdir: str | None, target: tuple[str, int] | None) -> str:
    """The remote shell command that checks the python path, the workdir and the probe."""
    py = shlex.quote(python)
    cd = ""
    if workdir:
        cd = f"cd {shlex.quote(workdir)} 2>/dev/null || {{ echo @@workdir-missing; exit 0; }}; "
    extra = f" {shlex.quote(target[0])} {target[1]}" if target else ""
    return (
        f"{cd}[ -x {py} ] || {{ echo @@python-missing; exit 0; }}; "
        f"{py} -c {shlex.quote(_PROBE)} edgetrain-preflight{extra}"
    )


def _verdict(
    python: str, workdir: str | None, target: tuple[str, int] | None, out: str
) -> str | None:
    """None when the probe output says all is well, else the one-line problem."""
    marks = {ln.split(" ", 1)[0]: ln.partition(" ")[2] for ln in out.splitlines() if ln[:2] == "@@"}
    if "@@workdir-missing" in marks:
        return f"workdir '{workdir}' does not exist there; create it or fix `workdir`"
    if "@@python-missing" in marks:
        return f"python '{python}' is not an executable there; fix `python`/`venv` for the host"
    old = python_problem(marks.get("@@python"))
    if old is not None:
        return old
    if "@@import-failed" in marks:
        return (
            f"edgetrain does not import under {python} ({marks['@@import-failed']}); "
            "install it there"
        )
    version = marks.get("@@version")
    if version is None:
        return f"the probe under {python} printed no result: {_last_line(out)}"
    if version != edgetrain.__version__:
        return (
            f"edgetrain {version} there but {edgetrain.__version__} here; install the same version"
        )
    if target is not None and "@@port-ok" not in marks:
        why = marks.get("@@port-failed", "no answer")
        return (
            f"cannot reach the coordinator at {target[0]}:{target[1]} from there ({why}); "
            "set `coordinator`/`bind` in the hosts file or open the port"
        )
    return None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def check_host(hosts: HostsFile, host: Host, target: tuple[str, int] | None) -> str | None:
    """The problem with ``host`` (one line), or None when workers can start there."""
    python = hosts.python_for(host)
    script = probe_script(python, host.workdir, target)
    timeout = hosts.connect_timeout_s + 30
    try:
        done = subprocess.run(
            ssh_command(hosts, host, script),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"no answer over ssh within {timeout} s"
    except OSError as exc:
        return f"cannot run ssh: {exc}; install the OpenSSH client"
    if done.returncode == 255:
        return f"unreachable over ssh: {_last_line(done.stderr)}"
    if done.returncode != 0:
        return f"the check exited with {done.returncode}: {_last_line(done.stdout + done.stderr)}"
    return _verdict(python, host.workdir, target, done.stdout)


def check_hosts(hosts: HostsFile, target: tuple[str, int] | None = None) -> None:
    """Check every host in parallel; raise :class:`PreflightError` listing each failing one."""
    with ThreadPoolExecutor(max_workers=min(32, len(hosts.hosts))) as pool:
        verdicts = list(pool.map(lambda h: check_host(hosts, h, target), hosts.hosts))
    failing = [
        f"{h.label} ({h.address}): {v}" for h, v in zip(hosts.hosts, verdicts, strict=True) if v
    ]
    if failing:
        lines = "\n  ".join(failing)
        raise PreflightError(
            f"ssh preflight failed on {len(failing)} of {len(hosts.hosts)} hosts:\n  {lines}"
        )
