"""``edgetrain hosts check`` and ``hosts install`` against the project's loopback sshd: a host
whose python has torch but not edgetrain is named; install puts this edgetrain there."""

from __future__ import annotations

import json
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


def _edgetrain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgetrain", *args], capture_output=True, text=True, timeout=600
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
