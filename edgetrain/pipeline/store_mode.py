"""Which weight store a pipeline technique declares: its module's ``STORE``."""

from __future__ import annotations

import importlib

from edgetrain import techniques


def store_mode(technique: str) -> str:
    """How ``technique``'s stages keep their weights: the ``STORE`` its module declares
    (``latest``, ``versions``, or ``pairs``, which may fall back to versions per unit);
    ``latest`` for a name the pipeline family does not have."""
    spec = techniques.families()["pipeline"].techniques.get(technique)
    if spec is None:
        return "latest"
    module = importlib.import_module(spec.runner.partition(":")[0])
    return str(getattr(module, "STORE", "latest"))
