"""Device facts for a profile: CPU model, cores, memory, torch threads, CUDA, FLOP rate."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

from edgetrain.envinfo import cpu_model, mem_total_bytes


def device_info() -> dict[str, Any]:
    """The device block of a profile: the hardware facts of :mod:`edgetrain.envinfo`, without
    its torchvision import (seconds on a small device), which a link probe does not need."""
    import torch

    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "memory_bytes": mem_total_bytes(),
        "torch_threads": torch.get_num_threads(),
        "cuda": cuda,
        "torch": torch.__version__,
        "platform": platform.platform(),
        "pid": os.getpid(),
    }


def measure_flop_rate(device: str = "cpu", n: int = 512, repeats: int = 5) -> float:
    """Floating-point operations per second of an ``n x n`` float32 matmul (median of repeats)."""
    import torch

    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    times = []
    for i in range(repeats + 2):
        _sync(device)
        t0 = time.perf_counter()
        (a @ b).sum().item()
        _sync(device)
        if i >= 2:  # two warm-ups
            times.append(time.perf_counter() - t0)
    times.sort()
    return 2.0 * n**3 / times[len(times) // 2]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
