"""What each host of a hosts file has: reachable over ssh, its python, edgetrain and torch
versions, cores, memory, CUDA (``edgetrain hosts check``); and installing this edgetrain there
(``edgetrain hosts install``): a wheel built here, copied over ssh, installed into the host's
python. Every host is asked in parallel; each failing host is one line."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import edgetrain
from edgetrain.launch.hosts import Host, HostsError, HostsFile
from edgetrain.launch.ssh import ssh_command

# Runs on the host: one JSON line of facts, whatever is missing.
_FACTS = r"""
import json, os, platform, sys
out = {"python": platform.python_version(), "cores": os.cpu_count()}
try:
    with open("/proc/meminfo") as fh:
        out["memory_bytes"] = int(fh.readline().split()[1]) * 1024
except Exception:
    out["memory_bytes"] = None
try:
    import edgetrain
    out["edgetrain"] = edgetrain.__version__
except Exception as exc:
    out["edgetrain"] = None
    out["edgetrain_error"] = type(exc).__name__
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
except Exception as exc:
    out["torch"] = None
    out["cuda"] = None
print("@@facts " + json.dumps(out))
"""


@dataclass
class HostFacts:
    """One host as its check found it; ``problem`` is None when workers can run there."""

    name: str
    address: str
    python: str
    reachable: bool = False
    python_version: str | None = None
    edgetrain: str | None = None
    torch: str | None = None
    cores: int | None = None
    memory_bytes: int | None = None
    cuda: str | None = None
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ssh(
    hosts: HostsFile, host: Host, script: str, stdin: bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ssh_command(hosts, host, script),
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=hosts.connect_timeout_s + timeout,
    )


def _last(text: bytes) -> str:
    """The line that says what went wrong: pip's last ERROR line, else the last line."""
    lines = [ln.strip() for ln in text.decode(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1]


def facts(hosts: HostsFile, host: Host) -> HostFacts:
    """Ask ``host`` what it has."""
    python = hosts.python_for(host)
    out = HostFacts(host.label, host.address, python)
    py = shlex.quote(python)
    script = f"[ -x {py} ] || {{ echo @@python-missing; exit 0; }}; {py} -c {shlex.quote(_FACTS)}"
    try:
        done = _ssh(hosts, host, script)
    except subprocess.TimeoutExpired:
        out.problem = "no answer over ssh in time"
        return out
    except OSError as exc:
        out.problem = f"cannot run ssh: {exc}; install the OpenSSH client"
        return out
    if done.returncode == 255:
        out.problem = f"unreachable over ssh: {_last(done.stderr)}"
        return out
    out.reachable = True
    text = done.stdout.decode(errors="replace")
    if "@@python-missing" in text:
        out.problem = f"python '{python}' is not an executable there; fix `python`/`venv`"
        return out
    line = next((ln for ln in text.splitlines() if ln.startswith("@@facts ")), None)
    if line is None:
        out.problem = (
            f"the check under {python} printed no result: {_last(done.stdout + done.stderr)}"
        )
        return out
    data = json.loads(line.removeprefix("@@facts "))
    out.python_version = data.get("python")
    out.edgetrain = data.get("edgetrain")
    out.torch = data.get("torch")
    out.cores = data.get("cores")
    out.memory_bytes = data.get("memory_bytes")
    out.cuda = data.get("cuda")
    out.problem = _problem(out)
    return out


def _problem(f: HostFacts) -> str | None:
    if f.torch is None:
        return f"torch is not installed for {f.python}; install it first (a Jetson: NVIDIA's wheel)"
    if f.edgetrain is None:
        return "edgetrain is not installed there; run `edgetrain hosts install`"
    if f.edgetrain != edgetrain.__version__:
        here = edgetrain.__version__
        return f"edgetrain {f.edgetrain} there but {here} here; run `edgetrain hosts install`"
    return None


def each_host(hosts: HostsFile, job: Callable[[HostsFile, Host], HostFacts]) -> list[HostFacts]:
    with ThreadPoolExecutor(max_workers=min(32, len(hosts.hosts))) as pool:
        return list(pool.map(lambda h: job(hosts, h), hosts.hosts))


def check(hosts: HostsFile) -> list[HostFacts]:
    """Every host's facts, asked in parallel."""
    return each_host(hosts, facts)


def build_wheel(out_dir: Path) -> Path:
    """A wheel of this edgetrain, built from its source tree (an editable install)."""
    root = Path(edgetrain.__file__).resolve().parents[1]
    if not (root / "pyproject.toml").is_file():
        raise HostsError(
            f"edgetrain here is not a source checkout ({root}), so no wheel can be built",
            "run hosts install from a checkout of edgetrain (scripts/setup)",
        )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out_dir),
            str(root),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    wheels = sorted(out_dir.glob("edgetrain-*.whl"))
    if done.returncode != 0 or not wheels:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise HostsError(f"building the edgetrain wheel failed: {why}")
    return wheels[-1]


def install_one(hosts: HostsFile, host: Host, wheel: Path) -> HostFacts:
    """Copy the wheel to ``host`` and install it into its python (torch must be there)."""
    before = facts(hosts, host)
    if not before.reachable or before.python_version is None:
        return before
    if before.torch is None:
        before.problem = _problem(before)
        return before
    py = shlex.quote(hosts.python_for(host))
    # pip wants the wheel's own file name: a private directory keeps it
    folder = "$(mktemp -d /tmp/edgetrain-install-XXXXXX)"
    script = (
        f'd={folder} && cat > "$d/{wheel.name}" && '
        f'{py} -m pip install -q --disable-pip-version-check --upgrade "$d/{wheel.name}"; '
        'code=$?; rm -rf "$d"; exit $code'
    )

    try:
        done = _ssh(hosts, host, script, stdin=wheel.read_bytes(), timeout=900)
    except subprocess.TimeoutExpired:
        before.problem = "pip install did not finish in time"
        return before
    if done.returncode != 0:
        before.problem = f"pip install failed there: {_last(done.stderr + done.stdout)}"
        return before
    return facts(hosts, host)


def install(hosts: HostsFile) -> list[HostFacts]:
    """Install this edgetrain on every host; the facts after."""
    with tempfile.TemporaryDirectory(prefix="edgetrain-wheel-") as tmp:
        wheel = build_wheel(Path(tmp))
        return each_host(hosts, lambda h, host: install_one(h, host, wheel))


def failing(found: list[HostFacts]) -> None:
    """Raise one error listing each host with a problem (exit 2), or return."""
    bad = [f for f in found if f.problem]
    if bad:
        lines = "\n  ".join(f"{f.name} ({f.address}): {f.problem}" for f in bad)
        raise HostsError(f"{len(bad)} of {len(found)} hosts cannot run workers:\n  {lines}")
