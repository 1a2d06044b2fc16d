"""Start workers on other hosts with the system ``ssh`` client, and stop them there too.

The remote shell prints its pid first (sshd makes it a process-group leader), then runs the
worker and prints its exit status. The launcher keeps ssh's stdin open: when the launcher or the
connection dies, the worker sees end of file and exits by itself; ``terminate``/``kill`` also
signal the remote process group over a second ssh connection, so no host keeps an orphan.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import signal
import subprocess
import threading
import time

from edgetrain.launch.base import WorkerSpec
from edgetrain.launch.hosts import Host, HostsFile, Placement
from edgetrain.launch.local import write_stdin
from edgetrain.launch.logstream import LineSink, LogTee
from edgetrain.launch.ssh_argv import ssh_command as ssh_command
from edgetrain.launch.ssh_preflight import check_hosts, endpoint_target

log = logging.getLogger(__name__)

PID_MARK = "@@edgetrain-remote-pid"
EXIT_MARK = "@@edgetrain-remote-exit"
_CONTROL = re.compile(rf"^({PID_MARK}|{EXIT_MARK}) (\d+)$")


def resolve_hostname(hosts: HostsFile, host: Host) -> str:
    """What ssh itself connects to for ``host`` (``ssh -G``: an alias's HostName from the ssh
    config), or the address unchanged if ssh cannot say."""
    argv = ssh_command(hosts, host, "")[:-1]  # (no remote command)
    argv.insert(1, "-G")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return host.address
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "hostname" and value.strip():
            return value.strip()
    return host.address


def resolve_hosts(hosts: HostsFile) -> HostsFile:
    """``hosts`` with each host's ``hostname`` filled from ssh's own resolution."""
    resolved = [
        h if h.hostname else h.model_copy(update={"hostname": resolve_hostname(hosts, h)})
        for h in hosts.hosts
    ]
    return hosts.model_copy(update={"hosts": resolved})


def worker_script(
    python: str, workdir: str | None, env: dict[str, str], args: tuple[str, ...]
) -> str:
    """The remote shell command: report the pid, run the worker, report its exit status."""
    cd = f"cd {shlex.quote(workdir)} && " if workdir else ""
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**env, "PYTHONUNBUFFERED": "1"}.items())
    cmd = " ".join(shlex.quote(a) for a in (python, "-m", "edgetrain", *args))
    return (
        f'echo "{PID_MARK} $$"; exec 2>&1; {cd}env {assigns} {cmd}; '
        f'c=$?; echo "{EXIT_MARK} $c"; exit $c'
    )


def kill_script(pid: int, sig: str) -> str:
    """Signal the remote process group ``pid`` (or the process alone where it leads none)."""
    return f"kill -{sig} -- -{pid} 2>/dev/null || kill -{sig} {pid} 2>/dev/null; true"


def _exit_code(code: int) -> int:
    """A shell status of 128+N means the worker was killed by signal N: report -N, as Popen."""
    return -(code - 128) if 128 < code < 128 + 65 else code


class SshProcess:
    """A worker started over ssh: ``pid`` is the local ssh client's, ``remote_pid`` the host's."""

    def __init__(
        self,
        spec: WorkerSpec,
        hosts: HostsFile,
        host: Host,
        popen: subprocess.Popen[bytes],
        sink: LineSink | None,
    ) -> None:
        self.worker_id = spec.worker_id
        self.host = spec.host
        self.log_path = spec.log_path
        self.remote_pid: int | None = None
        self.remote_exit: int | None = None
        self._hosts = hosts
        self._host = host
        self._popen = popen
        self._pid_seen = threading.Event()
        self._signalled: set[str] = set()
        self._helpers: list[subprocess.Popen[bytes]] = []
        assert popen.stdout is not None
        prefix = f"[w{spec.worker_id} {spec.host}]"
        self.tee = LogTee(popen.stdout, spec.log_path, prefix, sink, self._control).start()

    def _control(self, line: str) -> bool:
        m = _CONTROL.match(line)
        if m is None:
            return False
        if m.group(1) == PID_MARK:
            self.remote_pid = int(m.group(2))
            self._pid_seen.set()
        else:
            self.remote_exit = int(m.group(2))
        return True

    @property
    def pid(self) -> int | None:
        return self._popen.pid

    def poll(self) -> int | None:
        code = self._popen.poll()
        if code is None:
            return None
        self.tee.join(2.0)  # the exit status line comes just before end of file
        return _exit_code(self.remote_exit) if self.remote_exit is not None else code

    def _remote_may_run(self) -> bool:
        return self.remote_exit is None

    def _stop(self, sig: signal.Signals) -> None:
        name = sig.name.removeprefix("SIG")
        if name in self._signalled:
            return
        self._signalled.add(name)
        if self._popen.stdin is not None:
            with contextlib.suppress(OSError):
                self._popen.stdin.close()
        if self.remote_pid is None and self._popen.poll() is None:
            self._pid_seen.wait(1.0)  # just started: the pid line is on its way
        if self.remote_pid is not None and self._remote_may_run():
            self._remote(kill_script(self.remote_pid, name))
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._popen.pid, sig)

    def dump_stacks(self) -> str | None:
        """Ask the remote worker for its Python stacks (SIGUSR1 to the children of the remote
        shell, i.e. the worker, unless stopped: :func:`stacks_script`): it writes them to its
        standard error, which streams into its log here. Returns that log, or None when the
        remote process is unknown or gone."""
        if self.remote_pid is None or not self._remote_may_run() or self._popen.poll() is not None:
            return None
        started = self._remote(stacks_script(self.remote_pid))
        return str(self.log_path) if started else None

    def _remote(self, script: str) -> bool:
        """Run ``script`` on the worker's host over a second ssh connection, in the background
        (reaped with the worker's other helpers); False when ssh cannot be started."""
        argv = ssh_command(self._hosts, self._host, script)
        try:
            self._helpers.append(
                subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        except OSError:
            return False
        return True

    def terminate(self) -> None:
        self._stop(signal.SIGTERM)

    def kill(self) -> None:
        self._stop(signal.SIGKILL)

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        try:
            self._popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self.reap_helpers(max(0.0, deadline - time.monotonic()))
        return self.poll()

    def reap_helpers(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for the remote-kill connections; kill those still going."""
        deadline = time.monotonic() + timeout
        for helper in self._helpers:
            try:
                helper.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                helper.kill()
                helper.wait()


class SshLauncher:
    """Starts each worker on its host slot from ``hosts`` (``spec.slot``, default its id)."""

    def __init__(
        self,
        hosts: HostsFile,
        num_workers: int,
        source: str,
        sink: LineSink | None = None,
        hosts_text: str | None = None,
    ) -> None:
        self.hosts = hosts
        self.hosts_text = hosts_text
        self.slots = hosts.slots(num_workers, source)
        self.sink = sink
        self.handles: list[SshProcess] = []

    @property
    def placements(self) -> list[Placement]:
        return [Placement.of(h) for h in self.slots]

    def start(self, spec: WorkerSpec) -> SshProcess:
        host = self.slots[spec.worker_id if spec.slot is None else spec.slot]
        script = worker_script(self.hosts.python_for(host), host.workdir, spec.env, spec.args)
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        popen = subprocess.Popen(
            ssh_command(self.hosts, host, script),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        write_stdin(popen, spec.stdin)  # through ssh to the remote worker's standard input
        handle = SshProcess(spec, self.hosts, host, popen, self.sink)
        self.handles.append(handle)
        log.info("worker %d on %s: ssh pid %d", spec.worker_id, host.label, popen.pid)
        return handle

    def preflight(self, endpoint: str) -> None:
        """Check from every host that the coordinator at ``endpoint`` can be reached."""
        check_hosts(self.hosts, endpoint_target(endpoint))

    def close(self, timeout: float = 15.0) -> None:
        """After the workers stopped: let remote kills finish and the logs drain."""
        deadline = time.monotonic() + timeout
        for h in self.handles:
            h.reap_helpers(max(0.0, deadline - time.monotonic()))
        for h in self.handles:
            h.tee.join(max(0.0, deadline - time.monotonic()))


def stacks_script(pid: int) -> str:
    """The shell command that asks the children of remote shell ``pid`` for their stacks:
    SIGUSR1 to each one that is not stopped (state T or t in ``/proc/N/stat``). A stopped
    worker cannot answer, and the pending signal would run faulthandler when it resumes,
    beside its running threads (a local worker resumed that way crashed with SIGSEGV; see
    ``launch.local.stopped``). Where ``/proc`` cannot say, the signal goes, as before."""
    state = "$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1)"
    return (
        f'for p in $(pgrep -P {int(pid)}); do case "{state}" in T|t) ;; '
        '*) kill -USR1 "$p" 2>/dev/null;; esac; done; true'
    )
