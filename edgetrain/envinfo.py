"""Environment report: the versions and hardware facts users paste into bug reports."""

from __future__ import annotations

import os
import platform
import re
import sys
from importlib import metadata, util
from pathlib import Path
from typing import Any

import edgetrain


def mem_total_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    """The versions an artifact records: edgetrain, python, torch, numpy, pyzmq and libzmq."""
    import numpy
    import torch
    import zmq

    return {
        "edgetrain": edgetrain.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
    }


def torchvision_version() -> str | None:
    """torchvision's ``__version__`` (local part included, e.g. ``0.29.1+cu130``) read from its
    ``version.py`` without importing it: ``import torchvision`` pulls in ``torch._dynamo`` and
    takes longer than torch itself. Falls back to the installed distribution's version; None
    when torchvision is not installed."""
    spec = util.find_spec("torchvision")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        try:
            text = (Path(folder) / "version.py").read_text(encoding="utf-8")
        except OSError:
            continue
        found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        if found:
            return found.group(1)
    try:
        return metadata.version("torchvision")
    except metadata.PackageNotFoundError:
        return None


def environment_report() -> dict[str, Any]:
    """Collect versions of python, torch, torchvision, pyzmq/libzmq, numpy and edgetrain."""
    import torch
    import zmq

    cuda = torch.cuda.is_available()
    report: dict[str, Any] = {
        **versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torchvision": torchvision_version(),
        "curve_available": bool(zmq.has("curve")),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "memory_bytes": mem_total_bytes(),
        "torch_threads": torch.get_num_threads(),
        "cuda_available": cuda,
        "cuda_version": torch.version.cuda,
        "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if cuda
        else [],
    }
    return report
