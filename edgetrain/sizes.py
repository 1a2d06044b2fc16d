"""Memory sizes as users write them (``512m``, ``2g``, ``1.5GiB``, bytes as a number), for
hosts files, testbed specs and the planner's ``--memory-cap``. Pure."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_SIZE_UNIT = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def parse_size(value: str | int) -> int:
    """A memory size (``"512m"``, ``"2g"``, ``"1.5GiB"``, bytes as a number) in bytes."""
    if isinstance(value, bool):
        raise ValueError("a memory size is a string such as '512m'")
    if isinstance(value, int):
        size = value
    else:
        m = _SIZE.match(value)
        if m is None:
            raise ValueError(f"memory {value!r} is not a size; write it like '512m' or '2g'")
        unit = (m.group(2) or "").lower().rstrip("b").rstrip("i")
        size = int(float(m.group(1)) * _SIZE_UNIT[unit])
    if size < 32 * 2**20:
        raise ValueError(f"memory {value!r} is below 32 MiB; sshd and python need more")
    return size
