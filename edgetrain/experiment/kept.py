"""Results a reproduction measures outside its runs (profiles, timings, in-process checks):
computed once into ``OUT`` and kept, so that a resumed reproduction reads them back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgetrain.rundir import atomic_write_json


def kept(path: Path, make: Callable[[], Any]) -> Any:
    """The JSON at ``path`` if a run before wrote it, else ``make()`` written there."""
    if path.is_file():
        return json.loads(path.read_text())
    result = make()
    atomic_write_json(path, result)
    return result
