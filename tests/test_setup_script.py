"""``scripts/setup`` says, before any download, what this machine is and which torch fits it
(issue 30): a Jetson, an NVIDIA GPU (nvidia-smi or /proc/driver/nvidia/gpus) or neither, each a
made-up machine under EDGETRAIN_SETUP_ROOT; ``--dry-run`` changes nothing; bad input and an old
python are one line, exit 2, before a .venv exists."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

ORIN_RELEASE = (
    "# R36 (release), REVISION: 3.0, GCID: 36923193, BOARD: generic, EABI: aarch64, "
    "DATE: Fri Jul 19 23:24:25 UTC 2024\n"
)
UNREACHABLE = "http://127.0.0.1:1/whl/cpu"  # refused at once, on any machine
LOCAL_INDEX = "file:///nowhere/simple"  # not http(s): taken as reachable


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """scripts/setup and pyproject.toml alone, as setup reads nothing else before a venv."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "setup", root / "scripts" / "setup")
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def _machine(tmp_path: Path, kind: str) -> Path:
    """A made-up machine root: 'jetson', 'smi' (nvidia-smi answers), 'proc' or 'none'."""
    root = tmp_path / f"machine-{kind}"
    root.mkdir()
    if kind == "jetson":
        (root / "etc").mkdir()
        (root / "etc" / "nv_tegra_release").write_text(ORIN_RELEASE)
        (root / "proc" / "device-tree").mkdir(parents=True)
        (root / "proc" / "device-tree" / "model").write_bytes(
            b"NVIDIA Jetson AGX Orin Developer Kit\x00"
        )
    elif kind == "smi":
        (root / "usr" / "bin").mkdir(parents=True)
        smi = root / "usr" / "bin" / "nvidia-smi"
        smi.write_text('#!/bin/sh\necho "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)"\n')
        smi.chmod(0o755)
    elif kind == "proc":
        gpu = root / "proc" / "driver" / "nvidia" / "gpus" / "0000:01:00.0"
        gpu.mkdir(parents=True)
        (gpu / "information").write_text("Model: \t\t NVIDIA GeForce RTX 3060\nIRQ:   130\n")
    return root


def _setup(checkout: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("EDGETRAIN_TORCH")}
    return subprocess.run(
        ["bash", str(checkout / "scripts" / "setup"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **env},
    )


@pytest.mark.parametrize(
    ("kind", "machine", "fits"),
    [
        (
            "jetson",
            "NVIDIA Jetson AGX Orin Developer Kit, L4T R36.3.0 (JetPack 6)",
            "system",
        ),
        ("smi", "an NVIDIA GPU (GPU 0: NVIDIA H100 80GB HBM3)", "pinned"),
        ("proc", "an NVIDIA GPU (NVIDIA GeForce RTX 3060)", "pinned"),
        ("none", "no NVIDIA GPU (no nvidia-smi answer, no /proc/driver/nvidia/gpus)", "cpu"),
    ],
)
def test_dry_run_says_the_machine_and_the_choice_that_fits_it(
    checkout: Path, tmp_path: Path, kind: str, machine: str, fits: str
) -> None:
    root = _machine(tmp_path, kind)
    done = _setup(
        checkout, "--dry-run", EDGETRAIN_SETUP_ROOT=str(root), EDGETRAIN_TORCH_INDEX=LOCAL_INDEX
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"setup: this machine: {machine}; the choice that fits it: --torch {fits}"
    assert lines[1] == f"setup: auto: --torch {fits}"
    assert lines[2].startswith(f"setup: --torch {fits} would install ")
    if fits == "pinned":
        assert "torch==2.14.1 torchvision==0.29.1 from pip's configured index" in lines[2]
        assert "a CUDA build: about 6 GB in .venv, 3.2 GB of it nvidia/" in lines[2]
    if fits == "cpu":
        assert f"CPU-only, about 1.5 GB in .venv, from {LOCAL_INDEX}" in lines[2]
    assert not (checkout / ".venv").exists()


def test_auto_takes_pips_index_where_the_cpu_index_cannot_be_reached(
    checkout: Path, tmp_path: Path
) -> None:
    root = _machine(tmp_path, "none")
    done = _setup(
        checkout, "--dry-run", EDGETRAIN_SETUP_ROOT=str(root), EDGETRAIN_TORCH_INDEX=UNREACHABLE
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].endswith("the choice that fits it: --torch cpu")
    assert lines[1].startswith(f"setup: auto: PyTorch's CPU index {UNREACHABLE} cannot be reached")
    assert "taking torch from pip's configured index instead (--torch pinned" in lines[1]
    assert lines[2] == "setup: auto: --torch pinned"
    # an explicit cpu choice is told the same, and not switched
    cpu = _setup(
        checkout,
        "--torch",
        "cpu",
        "--dry-run",
        EDGETRAIN_SETUP_ROOT=str(root),
        EDGETRAIN_TORCH_INDEX=UNREACHABLE,
    )
    assert cpu.returncode == 0 and "--torch cpu would install" in cpu.stderr
    assert f"but {UNREACHABLE} cannot be reached from here" in cpu.stderr


def test_a_torch_spec_without_torchvision_is_torch_alone(checkout: Path, tmp_path: Path) -> None:
    done = _setup(
        checkout,
        "--torch=cpu",
        "--dry-run",
        EDGETRAIN_SETUP_ROOT=str(_machine(tmp_path, "none")),
        EDGETRAIN_TORCH="torch==2.13.0",
        EDGETRAIN_TORCH_INDEX=LOCAL_INDEX,
    )
    assert done.returncode == 0, done.stderr
    assert "would install torch==2.13.0, CPU-only" in done.stderr
    assert "setup: no torchvision in 'torch==2.13.0': torch alone" in done.stderr


def test_bad_choices_are_one_line_and_exit_2(checkout: Path) -> None:
    for args, line in (
        (["--torch", "gpu"], "setup: --torch must be auto, pinned, cpu or system (got 'gpu')"),
        (["--torch"], "setup: --torch must be auto, pinned, cpu or system (got '')"),
        (["--fast"], "setup: unknown option '--fast'; see scripts/setup --help"),
    ):
        done = _setup(checkout, *args)
        assert (done.returncode, done.stderr) == (2, line + "\n")
    env = _setup(checkout, EDGETRAIN_TORCH_CHOICE="cuda")
    assert env.returncode == 2 and "(got 'cuda')" in env.stderr
    assert not (checkout / ".venv").exists()


def _fake_python(tmp_path: Path, version: str, has_torch: bool) -> Path:
    """A "python3" that answers setup's questions as an old or torch-less one would."""
    old = tuple(int(p) for p in version.split(".")[:2]) < (3, 10)
    path = tmp_path / f"python-{version}"
    path.write_text(
        "#!/bin/bash\n"
        'case "$*" in\n'
        f"  *version_info*) exit {1 if old else 0} ;;\n"
        f"  *python_version*) echo {version} ;;\n"
        f'  *"import torch"*) exit {0 if has_torch else 1} ;;\n'
        "  *) exit 0 ;;\n"
        "esac\n"
    )
    path.chmod(0o755)
    return path


def test_an_old_python_is_one_line_pointing_to_the_jetson_page(
    checkout: Path, tmp_path: Path
) -> None:
    done = _setup(
        checkout,
        "--torch",
        "pinned",
        PYTHON=str(_fake_python(tmp_path, "3.8.10", has_torch=True)),
        EDGETRAIN_SETUP_ROOT=str(_machine(tmp_path, "none")),
    )
    assert done.returncode == 2, done.stderr
    last = done.stderr.splitlines()[-1]
    assert "is Python 3.8.10; edgetrain needs 3.10 or newer" in last
    assert "docs/jetson.md" in last and not (checkout / ".venv").exists()


def test_a_jetson_without_nvidias_torch_is_told_to_install_it_first(
    checkout: Path, tmp_path: Path
) -> None:
    done = _setup(
        checkout,
        PYTHON=str(_fake_python(tmp_path, "3.10.12", has_torch=False)),
        EDGETRAIN_SETUP_ROOT=str(_machine(tmp_path, "jetson")),
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].endswith("the choice that fits it: --torch system")
    assert lines[-1].startswith("setup: --torch system, but ")
    assert "install NVIDIA's PyTorch wheel for this JetPack first (docs/jetson.md)" in lines[-1]
    assert not (checkout / ".venv").exists()
