"""A small profile for the ``edgetrain plan`` tests: five conv layers of growing size on host
``h``, written where ``plan --profile`` looks (``RUN/profiles/h.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_profile(tmp_path: Path, links: list[Any] | None = None) -> Path:
    """``tmp_path/run/profiles/h.json`` with five layers and ``links`` (none by default)."""
    run = tmp_path / "run"
    (run / "profiles").mkdir(parents=True)
    layers = [
        {
            "name": f"conv{i}",
            "param_bytes": 400_000 * (i + 1),
            "activation_bytes": 1000,
            "fwd_s": 0.01,
            "bwd_s": 0.02,
        }
        for i in range(5)
    ]
    prof = {"schema_version": 1, "host": "h", "layers": layers, "links": links or []}
    path = run / "profiles" / "h.json"
    path.write_text(json.dumps(prof))
    return path
