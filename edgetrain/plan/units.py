"""Bandwidth and duration strings as users write them: ``100mbit``, ``12.5MBps``, ``10ms``."""

from __future__ import annotations

import re

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z/]*)\s*$", re.IGNORECASE)
_BITS = {
    "bit": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "bps": 1,
    "kbps": 1e3,
    "mbps": 1e6,
    "gbps": 1e9,
}
_BYTES = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
_TIME = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_bandwidth(text: str) -> float:
    """Bytes per second. ``100mbit`` (bits, tc's spelling; also ``mbps``), ``12.5MBps`` or
    ``12.5MB/s`` (bytes), or a plain number of bytes per second."""
    m = _RATE.match(text)
    if not m:
        raise ValueError(f"bandwidth {text!r} is not a number with a unit, e.g. 100mbit")
    value, unit = float(m.group(1)), m.group(2)
    if unit.endswith("Bps"):  # bytes: KBps, MBps, GBps
        return _bytes(value, unit[:-3] + "b", text)
    if unit.endswith("/s"):  # bytes: KB/s, MiB/s
        return _bytes(value, unit[:-2], text)
    if unit.lower() in _BITS:
        return _positive(value * _BITS[unit.lower()] / 8.0, text)
    return _bytes(value, unit, text)


def _bytes(value: float, unit: str, text: str) -> float:
    low = unit.lower()
    if low not in _BYTES:
        raise ValueError(
            f"bandwidth {text!r}: unknown unit {unit!r}; use kbit, mbit, gbit, or KBps/MBps/GBps"
        )
    return _positive(value * _BYTES[low], text)


def _positive(value: float, text: str) -> float:
    if value <= 0:
        raise ValueError(f"bandwidth {text!r} must be positive")
    return value


def parse_duration(text: str) -> float:
    """Seconds, from ``10ms``, ``250us``, ``0.5s`` or a plain number of seconds."""
    m = _RATE.match(text)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _TIME:
        raise ValueError(f"duration {text!r} is not a number with a unit, e.g. 10ms or 0.5s")
    return float(m.group(1)) * _TIME[unit]


def format_bandwidth(bytes_per_s: float) -> str:
    bits = bytes_per_s * 8
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale:
            return f"{bits / scale:g}{unit}"
    return f"{bits:g}bit"
