"""``edgetrain hosts check`` telling a Jetson's torch, CUDA and Python apart (issue 30): the
probe's output parsed from literal strings, as a Jetson on JetPack 6 or 5 and an x86 laptop
would send it; and the probe itself run here, under this python."""

from __future__ import annotations

import ast
import json
import platform
import subprocess
import sys
from typing import Any

import pytest
import torch
from rich.console import Console

import edgetrain
from edgetrain.cli.hosts_cmd import _table
from edgetrain.launch import hostinfo, jetson, ssh_preflight
from edgetrain.launch.hostinfo import HostFacts, failing, read_facts
from edgetrain.launch.hosts import HostsError

ORIN_RELEASE = (
    "# R36 (release), REVISION: 3.0, GCID: 36923193, BOARD: generic, EABI: aarch64, "
    "DATE: Fri Jul 19 23:24:25 UTC 2024\n"
    "# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\n"
)
ORIN_MODEL = "NVIDIA Jetson AGX Orin Developer Kit\x00"
XAVIER_RELEASE = (
    "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, "
    "DATE: Tue Aug  1 19:57:35 UTC 2023\n"
)
NANO_RELEASE = "# R32 (release), REVISION: 7.4, GCID: 33514132, BOARD: t210ref, EABI: aarch64\n"


def _probe(**facts: Any) -> str:
    """What the probe prints on a host: a login banner line, then its one facts line."""
    base: dict[str, Any] = {"python": "3.10.12", "cores": 12, "memory_bytes": 64 * 2**30}
    base.update(edgetrain=edgetrain.__version__, board=None, tegra=None)
    return "Welcome to Ubuntu\n@@facts " + json.dumps({**base, **facts}) + "\n"


def _read(text: str) -> HostFacts:
    facts = HostFacts("dev", "192.168.1.10", "/home/edge/venv/bin/python", reachable=True)
    assert read_facts(facts, text)
    return facts


def _render(found: list[HostFacts]) -> str:
    console = Console(width=400, record=True, color_system=None)
    console.print(_table(found, "hosts"))
    return console.export_text()


def test_release_and_board_strings_parse() -> None:
    assert jetson.l4t_release(ORIN_RELEASE) == "R36.3.0"
    assert jetson.l4t_release(XAVIER_RELEASE) == "R35.4.1"
    assert jetson.l4t_release(NANO_RELEASE) == "R32.7.4"
    assert [jetson.jetpack_major(r) for r in ("R36.3.0", "R35.4.1", "R32.7.4")] == ["6", "5", "4"]
    assert jetson.jetpack_major("R99.1") is None and jetson.jetpack_major(None) is None
    for junk in (None, "", "hello\n", "# R36 release\n"):
        assert jetson.l4t_release(junk) is None
    assert jetson.board_model(ORIN_MODEL) == "NVIDIA Jetson AGX Orin Developer Kit"
    assert jetson.board_model("\x00") is None and jetson.board_model(None) is None
    assert (
        jetson.describe_board("NVIDIA Jetson AGX Orin Developer Kit", "R36.3.0")
        == "NVIDIA Jetson AGX Orin Developer Kit, L4T R36.3.0 (JetPack 6)"
    )
    assert jetson.describe_board("Raspberry Pi 4 Model B Rev 1.4", None) == (
        "Raspberry Pi 4 Model B Rev 1.4"
    )
    assert jetson.describe_board(None, None) is None
    assert jetson.is_jetson(None, "R36.3.0") and jetson.is_jetson("NVIDIA Jetson Nano", None)
    assert not jetson.is_jetson("Raspberry Pi 4 Model B Rev 1.4", None)


def test_python_older_than_3_10_is_one_line_pointing_to_the_jetson_page() -> None:
    assert jetson.python_problem("3.10.12") is None and jetson.python_problem("3.12.1") is None
    assert jetson.python_problem(None) is None and jetson.python_problem("odd") is None
    line = jetson.python_problem("3.8.10", jetson=True)
    assert line == (
        "Python 3.8.10 there, but edgetrain needs 3.10 or newer; point `python`/`venv` at a "
        "Python 3.10+ (JetPack 5 and older ship an older Python: see docs/jetson.md)"
    )
    other = jetson.python_problem("3.6.9")
    assert other is not None and "docs/jetson.md" in other and "\n" not in other


def test_a_jetpack_6_orin_with_nvidias_torch() -> None:
    facts = _read(
        _probe(
            torch="2.5.0a0+872d972e41.nv24.08",
            torch_cuda="12.6",
            cuda_available=True,
            cuda="Orin",
            board=ORIN_MODEL,
            tegra=ORIN_RELEASE,
        )
    )
    assert (facts.python_version, facts.torch, facts.torch_cuda) == (
        "3.10.12",
        "2.5.0a0+872d972e41.nv24.08",
        "12.6",
    )
    assert facts.cuda_available and facts.cuda == "Orin" and facts.jetson
    assert (facts.board, facts.l4t, facts.jetpack) == (
        "NVIDIA Jetson AGX Orin Developer Kit",
        "R36.3.0",
        "6",
    )
    assert facts.problem is None and facts.note is None
    data = facts.to_dict()
    assert data["jetson"] is True and data["l4t"] == "R36.3.0" and data["torch_cuda"] == "12.6"
    text = _render([facts])
    assert "torch CUDA: device" in text and "12.6: Orin" in text
    assert "NVIDIA Jetson AGX Orin Developer Kit, L4T R36.3.0 (JetPack 6)" in text
    failing([facts])  # nothing to say


def test_a_jetpack_5_xavier_is_named_with_its_python_and_the_fix() -> None:
    facts = _read(
        _probe(
            python="3.8.10",
            edgetrain=None,
            torch="2.1.0a0+41361538.nv23.06",
            torch_cuda="11.4",
            cuda_available=True,
            cuda="Xavier",
            board="NVIDIA Jetson AGX Xavier Developer Kit\x00",
            tegra=XAVIER_RELEASE,
        )
    )
    assert (facts.l4t, facts.jetpack, facts.torch_cuda) == ("R35.4.1", "5", "11.4")
    assert facts.problem is not None and facts.problem.startswith("Python 3.8.10 there")
    assert "docs/jetson.md" in facts.problem
    with pytest.raises(HostsError) as info:
        failing([facts])
    lines = str(info.value).splitlines()
    assert lines[0] == "1 of 1 hosts cannot run workers:"
    assert lines[1].strip() == f"dev (192.168.1.10): {facts.problem}" and len(lines) == 2
    assert "L4T R35.4.1 (JetPack 5)" in _render([facts])


def test_a_jetson_with_a_cpu_only_torch_is_noted_and_a_laptop_is_not() -> None:
    jetson_cpu = _read(
        _probe(
            torch="2.4.0",
            torch_cuda=None,
            cuda_available=False,
            board=ORIN_MODEL,
            tegra=ORIN_RELEASE,
        )
    )
    assert jetson_cpu.problem is None and jetson_cpu.note is not None
    assert "CPU-only build" in jetson_cpu.note and "docs/jetson.md" in jetson_cpu.note
    laptop = _read(_probe(torch="2.13.0+cpu", torch_cuda=None, cuda_available=False))
    assert not laptop.jetson and laptop.board is None and laptop.l4t is None
    assert laptop.problem is None and laptop.note is None
    cuda_no_gpu = _read(_probe(torch="2.14.1", torch_cuda="13.0", cuda_available=False))
    assert cuda_no_gpu.problem is None and cuda_no_gpu.note is None
    text = _render([jetson_cpu, laptop, cuda_no_gpu])
    assert "CPU-only build" in text and "13.0, no device" in text and "GPU goes unused" in text


def test_torch_missing_or_broken_is_told_apart() -> None:
    missing = _read(_probe(torch=None, torch_error="ModuleNotFoundError: No module named 'torch'"))
    assert missing.problem == (
        "torch is not installed for /home/edge/venv/bin/python; install it first "
        "(a Jetson: NVIDIA's wheel, docs/jetson.md)"
    )
    broken = _read(
        _probe(
            torch=None,
            torch_error="ImportError: libcudnn.so.8: cannot open shared object file",
            board=ORIN_MODEL,
            tegra=ORIN_RELEASE,
        )
    )
    assert broken.problem == (
        "torch does not import under /home/edge/venv/bin/python (ImportError: libcudnn.so.8: "
        "cannot open shared object file); reinstall it (NVIDIA's wheel for its JetPack, "
        "docs/jetson.md)"
    )
    facts = HostFacts("dev", "h", "/p", reachable=True)
    assert not read_facts(facts, "no facts here\n")


def test_the_probe_runs_here_and_any_jetpack_python_can_parse_it() -> None:
    # JetPack 4 ships Python 3.6: the probes must parse there, so an old python is named
    ast.parse(hostinfo._FACTS, feature_version=(3, 6))
    ast.parse(ssh_preflight._PROBE, feature_version=(3, 6))
    done = subprocess.run(
        [sys.executable, "-c", hostinfo._FACTS], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    facts = _read(done.stdout)
    assert facts.python_version == platform.python_version()
    assert facts.torch == torch.__version__ and facts.torch_cuda == torch.version.cuda
    assert facts.cuda_available == torch.cuda.is_available()
    assert facts.edgetrain == edgetrain.__version__ and facts.problem is None


def test_the_launch_preflight_names_an_old_python_too() -> None:
    out = "@@python 3.8.10\n@@import-failed ModuleNotFoundError No module named 'edgetrain'\n"
    line = ssh_preflight._verdict("/usr/bin/python3", None, None, out)
    assert line is not None and line.startswith("Python 3.8.10 there, but edgetrain needs 3.10")
    ok = f"@@python 3.10.12\n@@version {edgetrain.__version__}\n"
    assert ssh_preflight._verdict("/usr/bin/python3", None, None, ok) is None
