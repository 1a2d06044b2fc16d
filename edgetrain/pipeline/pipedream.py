"""PipeDream: 1F1B pipelining with weight stashing. A microbatch's backward uses the weight
version its forward used; the update, computed at that version, is applied to the newest.
Stage s keeps m_s = N - s + e versions in steady state (``versions`` store)."""

from __future__ import annotations

from edgetrain.pipeline.roles import staged_runner

STORE = "versions"  # how its stages keep their weights (:mod:`edgetrain.pipeline.stores`)
make_runner = staged_runner
