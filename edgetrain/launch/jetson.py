"""What a host's files say about it as an edge device: the board (``/proc/device-tree/model``),
a Jetson's L4T release (``/etc/nv_tegra_release``) and the JetPack major it belongs to, and
whether its Python is new enough for edgetrain. Pure parsing of the strings a host's probe
sends back (``edgetrain hosts check`` and the launch preflight), so tests feed it literals."""

from __future__ import annotations

import re

MIN_PYTHON = (3, 10)
JETSON_DOC = "docs/jetson.md"

# L4T major release -> the JetPack major it ships in (R32: JetPack 4, R34 and R35: JetPack 5,
# R36: JetPack 6).
_JETPACK = {32: "4", 34: "5", 35: "5", 36: "6"}

# "# R36 (release), REVISION: 3.0, GCID: 36923193, BOARD: generic, EABI: aarch64, DATE: ..."
_RELEASE = re.compile(r"^#\s*R(\d+)\s*\(release\),\s*REVISION:\s*(\d+(?:\.\d+)*)")


def board_model(raw: str | None) -> str | None:
    """The board's name from ``/proc/device-tree/model`` (NUL-terminated there), or None."""
    if raw is None:
        return None
    name = raw.replace("\x00", " ").strip()
    return name or None


def l4t_release(text: str | None) -> str | None:
    """``R36.3.0`` from the first line of ``/etc/nv_tegra_release``, or None."""
    if not text:
        return None
    found = _RELEASE.match(text.lstrip().splitlines()[0])
    return f"R{found.group(1)}.{found.group(2)}" if found else None


def jetpack_major(l4t: str | None) -> str | None:
    """The JetPack major an L4T release belongs to (``R36.3.0`` -> ``6``), or None."""
    found = re.match(r"R(\d+)", l4t or "")
    return _JETPACK.get(int(found.group(1))) if found else None


def is_jetson(board: str | None, l4t: str | None) -> bool:
    return l4t is not None or "jetson" in (board or "").lower()


def describe_board(board: str | None, l4t: str | None) -> str | None:
    """``NVIDIA Jetson AGX Orin Developer Kit, L4T R36.3.0 (JetPack 6)``; None for no facts."""
    parts = [p for p in (board, l4t and f"L4T {l4t}") if p]
    jetpack = jetpack_major(l4t)
    text = ", ".join(parts)
    return (f"{text} (JetPack {jetpack})" if jetpack else text) or None


def python_problem(version: str | None, jetson: bool = False) -> str | None:
    """One line when ``version`` (``3.8.10``) is older than edgetrain supports, else None."""
    try:
        parts = tuple(int(p) for p in (version or "").split(".")[:2])
    except ValueError:
        return None
    if len(parts) < 2 or parts >= MIN_PYTHON:
        return None
    need = ".".join(map(str, MIN_PYTHON))
    where = (
        f"JetPack 5 and older ship an older Python: see {JETSON_DOC}"
        if jetson
        else f"install a Python {need} there (on a Jetson see {JETSON_DOC})"
    )
    return (
        f"Python {version} there, but edgetrain needs {need} or newer; point `python`/`venv` "
        f"at a Python {need}+ ({where})"
    )
