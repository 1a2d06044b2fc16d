"""GreedyUpdates: PipeDream's schedule with one weight copy, updated as soon as each backward
ends. Forward and backward both use the newest weights (the backward with activations saved
at an older version); no version is kept (``latest`` store)."""

from __future__ import annotations

from edgetrain.pipeline.roles import staged_runner

STORE = "latest"  # how its stages keep their weights (:mod:`edgetrain.pipeline.stores`)
make_runner = staged_runner
