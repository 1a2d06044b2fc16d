"""``edgetrain hosts check`` and ``hosts install`` against the project's loopback sshd: a host
whose python has torch but not edgetrain is named; install puts this edgetrain there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers.sshd import Sshd, sshd  # noqa: F401 - the fixture

SITE = Path(sysconfig.get_paths()["purelib"])


def _host_python(tmp_path: Path) -> Path:
    """A venv like a device's: torch and the other dependencies there, edgetrain not. It sees
    this environment's packages through links, every one but edgetrain's."""
    venv = tmp_path / "device-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    deps = tmp_path / "device-deps"
    deps.mkdir()
    for entry in SITE.iterdir():
        if "edgetrain" in entry.name.lower():
            continue
        (deps / entry.name).symlink_to(entry)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "device-deps.pth").write_text(f"{deps}\n")
    return venv / "bin" / "python"


def _hosts(tmp_path: Path, server: Sshd, python: Path) -> Path:
    opts = ", ".join(json.dumps(o) for o in server.ssh_options)
    path = tmp_path / "hosts.toml"
    path.write_text(
        f'ssh_options = [{opts}]\n\n[[hosts]]\nname = "device"\naddress = "{server.address}"\n'
        f'port = {server.port}\nuser = "{server.user}"\nidentity = "{server.identity}"\n'
        f'python = "{python}"\n'
    )
    return path


def _edgetrain(*args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgetrain", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": str(columns)},
    )


@pytest.mark.timeout(600)
def test_check_names_what_is_missing_and_install_puts_it_there(
    tmp_path: Path,
    sshd: Sshd,  # noqa: F811
) -> None:
    hosts = _hosts(tmp_path, sshd, _host_python(tmp_path))
    before = _edgetrain("hosts", "check", "--hosts", str(hosts), "--format", "json")
    assert before.returncode == 2, before.stderr
    found = json.loads(before.stdout)["hosts"][0]
    assert found["reachable"] and found["torch"] and found["edgetrain"] is None
    assert found["cores"] and found["memory_bytes"] and found["python_version"]
    import torch

    # torch's CUDA told apart: the version it was built with, and whether a device is there
    assert found["torch_cuda"] == torch.version.cuda
    assert found["cuda_available"] == torch.cuda.is_available()
    error = json.loads(before.stderr)
    assert error["error"].startswith("1 of 1 hosts cannot run workers")
    assert "device (127.0.0.1): edgetrain is not installed there" in error["error"]

    done = _edgetrain("hosts", "install", "--hosts", str(hosts), "--format", "json")
    assert done.returncode == 0, done.stderr
    after = json.loads(done.stdout)["hosts"][0]
    import edgetrain

    assert after["edgetrain"] == edgetrain.__version__ and after["problem"] is None
    again = _edgetrain("hosts", "check", "--hosts", str(hosts))
    assert again.returncode == 0 and "ok" in again.stdout


def test_an_unreachable_host_is_one_line(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[[hosts]]\naddress = "127.0.0.1"\nport = 1\nname = "gone"\n')
    done = _edgetrain("hosts", "check", "--hosts", str(hosts))
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1].strip()
    assert last.startswith("gone (127.0.0.1): unreachable over ssh")
    missing = _edgetrain("hosts", "check")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1


def _fake_python(tmp_path: Path, facts: dict[str, object]) -> Path:
    """A "python" that answers the check as a device's would: its one facts line."""
    path = tmp_path / "jetson-python"
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n@@facts {json.dumps(facts)}\nEOF\n")
    path.chmod(0o755)
    return path


@pytest.mark.timeout(120)
def test_check_tells_a_jetpack_5_boards_python_torch_and_cuda_apart(
    tmp_path: Path,
    sshd: Sshd,  # noqa: F811
) -> None:
    """Issue 30: over a real ssh connection, a Jetson on JetPack 5 (Python 3.8, NVIDIA's CUDA
    torch) is shown with its board, L4T release, torch CUDA and Python, and its Python is the
    one line that fails it, pointing to docs/jetson.md."""
    facts = {
        "python": "3.8.10",
        "cores": 8,
        "memory_bytes": 32 * 2**30,
        "edgetrain": None,
        "torch": "2.1.0a0+41361538.nv23.06",
        "torch_cuda": "11.4",
        "cuda_available": True,
        "cuda": "Xavier",
        "board": "NVIDIA Jetson AGX Xavier Developer Kit\u0000",
        "tegra": "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64\n",
    }
    hosts = _hosts(tmp_path, sshd, _fake_python(tmp_path, facts))
    done = _edgetrain("hosts", "check", "--hosts", str(hosts), "--format", "json")
    assert done.returncode == 2, done.stderr
    found = json.loads(done.stdout)["hosts"][0]
    assert found["board"] == "NVIDIA Jetson AGX Xavier Developer Kit" and found["jetson"]
    assert (found["l4t"], found["jetpack"]) == ("R35.4.1", "5")
    assert (found["python_version"], found["torch_cuda"], found["cuda"]) == (
        "3.8.10",
        "11.4",
        "Xavier",
    )
    error = json.loads(done.stderr)["error"].splitlines()
    assert error[0] == "1 of 1 hosts cannot run workers:" and len(error) == 2
    assert error[1].strip().startswith("device (127.0.0.1): Python 3.8.10 there, but edgetrain")
    assert "docs/jetson.md" in error[1]
    text = _edgetrain("hosts", "check", "--hosts", str(hosts), columns=400)
    assert text.returncode == 2 and "JetPack 5" in text.stdout and "11.4: Xavier" in text.stdout
