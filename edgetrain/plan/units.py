"""Bandwidth and duration strings as users write them: ``100mbit``, ``12.5MBps``, ``10ms``."""

from __future__ import annotations

import re

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z/]*)\s*$", re.IGNORECASE)
_BIT_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}
_BYTE_PREFIX = {**_BIT_PREFIX, "ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30}
ACCEPTED_RATES = "100mbit, 1gbit or 100Mbps (bits/s), 12.5MBps or 12.5MB/s (bytes/s)"
_PREFIX_NAME = {"": "", "k": "kilo", "m": "mega", "g": "giga", "ki": "kibi", "mi": "mebi"}
_PREFIX_NAME["gi"] = "gibi"
_TIME = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_bandwidth(text: str) -> float:
    """Bytes per second from a rate with its unit. Bits: ``100mbit``, ``1gbit``, ``100Mbit/s``,
    ``100Mbps`` (a lowercase ``bps``). Bytes: ``12.5MBps``, ``12.5MB/s``, ``12.5MB``,
    ``1MiBps`` (an uppercase ``B``). A number without a unit, and units that may mean bits or
    bytes (``10mb``, ``10Mb/s``, ``10MBPS``), raise ``ValueError("problem; fix")``."""
    m = _RATE.match(text)
    if not m:
        raise ValueError(
            f"bandwidth {text!r} is not a number with a unit; write it as {ACCEPTED_RATES}"
        )
    number, unit = m.group(1), m.group(2)
    value = float(number)
    if not unit:
        raise ValueError(
            f"bandwidth {text!r} has no unit; write {number}mbit for megabits/s or "
            f"{number}MBps for megabytes/s (accepted: {ACCEPTED_RATES})"
        )
    per_s = unit.endswith("/s")
    base = unit[:-2] if per_s else unit
    low = base.lower()
    if low.endswith("bit") and low[:-3] in _BIT_PREFIX:  # kbit, Mbit/s: bits
        return _positive(value * _BIT_PREFIX[low[:-3]] / 8.0, text)
    if not per_s and base.endswith("bps") and low[:-3] in _BIT_PREFIX:  # Mbps: bits
        return _positive(value * _BIT_PREFIX[low[:-3]] / 8.0, text)
    if not per_s and base.endswith("Bps") and low[:-3] in _BYTE_PREFIX:  # MBps: bytes
        return _positive(value * _BYTE_PREFIX[low[:-3]], text)
    if base.endswith("B") and low[:-1] in _BYTE_PREFIX:  # MB, MB/s, MiB: bytes
        return _positive(value * _BYTE_PREFIX[low[:-1]], text)
    for suffix in ("bps", "b"):  # 10mb, 10Mb/s, 10MBPS: bits or bytes?
        prefix = low[: -len(suffix)]
        if low.endswith(suffix) and prefix in _BYTE_PREFIX:
            p = prefix[:1]
            raise ValueError(
                f"bandwidth {text!r} is ambiguous: {unit!r} may mean bits or bytes per second; "
                f"write {number}{p}bit for {_PREFIX_NAME[p]}bits/s or "
                f"{number}{prefix.capitalize()}Bps for {_PREFIX_NAME[prefix]}bytes/s"
            )
    raise ValueError(f"bandwidth {text!r}: unknown unit {unit!r}; write it as {ACCEPTED_RATES}")


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


def describe_bandwidth(bytes_per_s: float) -> str:
    """A rate for people, in bits and bytes: ``100 Mbit/s (12.5 MB/s)``."""
    bits, by = bytes_per_s * 8, "B/s"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if bytes_per_s >= scale:
            by = f"{bytes_per_s / scale:.4g} {unit}B/s"
            break
    else:
        by = f"{bytes_per_s:.4g} B/s"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.4g} {unit}bit/s ({by})"
    return f"{bits:.4g} bit/s ({by})"


def format_bandwidth(bytes_per_s: float) -> str:
    bits = bytes_per_s * 8
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale:
            return f"{bits / scale:g}{unit}"
    return f"{bits:g}bit"
