"""Peak memory of a piece of work: CUDA allocator peak, or the process's peak RSS on Linux.

On CPU, torch allocations bypass ``tracemalloc``, so the peak resident set size is used:
writing ``5`` to ``/proc/self/clear_refs`` resets ``VmHWM`` (Linux >= 4.0), the work runs, and
``VmHWM`` is read back. That peak covers the whole process (interpreter, torch, model, data) at
the moment of the step's highest use. Where ``clear_refs`` cannot be written, the lifetime peak
``ru_maxrss`` is the (upper-bound) fallback; the source is reported with the figure.
"""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class PeakMemory:
    """Filled in when the :func:`peak_memory` block ends."""

    bytes: int = 0
    source: str = ""
    _extra: dict[str, int] = field(default_factory=dict)


def _status(field_name: str) -> int | None:
    """A figure of ``/proc/self/status`` in bytes, or None where it cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def rss_bytes() -> int | None:
    """This process's resident set now (``VmRSS``)."""
    return _status("VmRSS")


def rss_peak_bytes() -> int | None:
    """This process's peak resident set since the last :func:`reset_rss_peak` (``VmHWM``)."""
    return _status("VmHWM")


def reset_rss_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux >= 4.0); False where it cannot be."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


@contextlib.contextmanager
def peak_memory(device: str = "cpu") -> Iterator[PeakMemory]:
    """Measure the peak memory of the ``with`` block on ``device``."""
    out = PeakMemory()
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        yield out
        torch.cuda.synchronize()
        out.bytes = int(torch.cuda.max_memory_allocated())
        out.source = "cuda_max_memory_allocated"
        return
    reset = reset_rss_peak()
    yield out
    hwm = rss_peak_bytes() if reset else None
    if hwm is not None:
        out.bytes, out.source = hwm, "vmhwm"
    else:
        out.bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        out.source = "ru_maxrss_lifetime"
