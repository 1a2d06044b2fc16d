"""Results a reproduction measures outside its runs (profiles, timings, in-process checks):
computed once into ``OUT`` and kept, so that a resumed reproduction reads them back."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.rundir import atomic_write_json


def kept(path: Path, make: Callable[[], Any]) -> Any:
    """The JSON at ``path`` if a run before wrote it, else ``make()`` written there."""
    if path.is_file():
        return json.loads(path.read_text())
    result = make()
    atomic_write_json(path, result)
    return result


def check_covers(
    path: Path,
    wanted: Iterable[str],
    section: str = "settings",
    same: Mapping[str, Any] | None = None,
) -> None:
    """Refuse a kept prediction at ``path`` whose ``section`` leaves out a key of ``wanted``,
    or that names one of ``same``'s fields (the dataset, say) with another value.

    A reproduction writes its prediction once, before its first run, and reads it back when it
    resumes; an ``--out`` first used by another plan (``--quick``, other rates or models) would
    otherwise report this plan's runs against that plan's prediction. Nothing kept: nothing to
    refuse. Reads the file only."""
    if not path.is_file():
        return
    try:
        doc = json.loads(path.read_text())
        have = doc.get(section) or {}
        if not isinstance(have, dict):
            raise ValueError(section)
    except (OSError, ValueError, AttributeError):
        raise EdgetrainError(
            f"{path} is not the JSON of a prediction",
            "move it away, or pass a new --out",
        ) from None
    for name, value in (same or {}).items():
        if name in doc and doc[name] != value:
            raise EdgetrainError(
                f"{path} was predicted for {name} {doc[name]!r}, not this plan's {value!r} "
                "(it is written once, before a reproduction's first run)",
                "pass a new --out, or the flags of the run that wrote it",
            )
    missing = [key for key in dict.fromkeys(wanted) if key not in have]
    if missing:
        raise EdgetrainError(
            f"{path} predicts {', '.join(sorted(have)) or 'nothing'}, not this plan's "
            f"{', '.join(missing)} (it is written once, before a reproduction's first run)",
            "pass a new --out, or the flags of the run that wrote it",
        )
