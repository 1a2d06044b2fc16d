"""What each host of a hosts file has: reachable over ssh, its python, edgetrain and torch
versions, the CUDA torch was built with and whether a CUDA device is there, cores, memory, and
for a Jetson its board and L4T/JetPack release (``edgetrain hosts check``); and installing this
edgetrain there (``edgetrain hosts install``): a wheel built here, copied over ssh, installed
into the host's python. Every host is asked in parallel; each failing host is one line."""

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
from edgetrain.launch import jetson
from edgetrain.launch.hosts import Host, HostsError, HostsFile
from edgetrain.launch.ssh import ssh_command

# Runs on the host: one JSON line of facts, whatever is missing. Plain Python 3 that any
# JetPack's python runs (3.6 on JetPack 4, 3.8 on JetPack 5), so an old one is named, not
# a syntax error; the device files are sent raw and parsed here (edgetrain.launch.jetson).
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
    out["torch_cuda"] = torch.version.cuda
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["cuda"] = torch.cuda.get_device_name(0) if out["cuda_available"] else None
except Exception as exc:
    out["torch"] = None
    out["cuda"] = None
    lines = str(exc).strip().splitlines()
    out["torch_error"] = type(exc).__name__ + (": " + lines[0] if lines else "")
for key, path in (("board", "/proc/device-tree/model"), ("tegra", "/etc/nv_tegra_release")):
    try:
        with open(path, "rb") as fh:
            out[key] = fh.read(4096).decode("utf-8", "replace")
    except Exception:
        out[key] = None
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
    torch_error: str | None = None  # why torch did not import, where it did not
    torch_cuda: str | None = None  # the CUDA torch was built with; None: a CPU-only build
    cuda_available: bool | None = None
    cuda: str | None = None  # the first CUDA device's name
    cores: int | None = None
    memory_bytes: int | None = None
    board: str | None = None  # /proc/device-tree/model: a Jetson's (or other board's) name
    l4t: str | None = None  # a Jetson's L4T release, R36.3.0
    jetpack: str | None = None  # the JetPack major of that release
    problem: str | None = None
    note: str | None = None  # worth knowing, but workers can run

    @property
    def jetson(self) -> bool:
        return jetson.is_jetson(self.board, self.l4t)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "jetson": self.jetson}


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
    if not read_facts(out, text):
        out.problem = (
            f"the check under {python} printed no result: {_last(done.stdout + done.stderr)}"
        )
    return out


def read_facts(out: HostFacts, text: str) -> bool:
    """Fill ``out`` from the probe's output (its ``@@facts`` JSON line) and judge it; False
    when the output holds no such line."""
    line = next((ln for ln in text.splitlines() if ln.startswith("@@facts ")), None)
    if line is None:
        return False
    data = json.loads(line.removeprefix("@@facts "))
    out.python_version = data.get("python")
    out.edgetrain = data.get("edgetrain")
    out.torch = data.get("torch")
    out.torch_error = data.get("torch_error")
    out.torch_cuda = data.get("torch_cuda")
    out.cuda_available = data.get("cuda_available")
    out.cuda = data.get("cuda")
    out.cores = data.get("cores")
    out.memory_bytes = data.get("memory_bytes")
    out.board = jetson.board_model(data.get("board"))
    out.l4t = jetson.l4t_release(data.get("tegra"))
    out.jetpack = jetson.jetpack_major(out.l4t)
    out.problem = _problem(out)
    out.note = None if out.problem else _note(out)
    return True


def _problem(f: HostFacts) -> str | None:
    old = jetson.python_problem(f.python_version, f.jetson)
    if old is not None:
        return old
    if f.torch is None:
        wheel = "NVIDIA's wheel for its JetPack" if f.jetson else "a Jetson: NVIDIA's wheel"
        wheel = f"{wheel}, {jetson.JETSON_DOC}"
        if f.torch_error and not f.torch_error.startswith("ModuleNotFoundError"):
            why = f"torch does not import under {f.python} ({f.torch_error})"
            return f"{why}; reinstall it ({wheel})"
        return f"torch is not installed for {f.python}; install it first ({wheel})"
    if f.edgetrain is None:
        return "edgetrain is not installed there; run `edgetrain hosts install`"
    if f.edgetrain != edgetrain.__version__:
        here = edgetrain.__version__
        return f"edgetrain {f.edgetrain} there but {here} here; run `edgetrain hosts install`"
    return None


def _note(f: HostFacts) -> str | None:
    """A Jetson whose torch cannot use its GPU, or a CUDA build that sees no device."""
    if f.torch is None:
        return None
    if f.jetson and f.torch_cuda is None:
        return (
            f"torch {f.torch} is a CPU-only build, so this Jetson's GPU goes unused: install "
            f"NVIDIA's PyTorch wheel for its JetPack ({jetson.JETSON_DOC})"
        )
    if f.torch_cuda is not None and f.cuda_available is False and f.jetson:
        return f"torch {f.torch} is built for CUDA {f.torch_cuda} but sees no CUDA device"
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
