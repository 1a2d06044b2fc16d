"""mcPipe: PipeDream's semantics without stashing. A stage keeps one base version plus the
(layer input, output error) pairs of the updates since; the newest weights are rebuilt on
demand for each forward and dropped (``pairs`` store). Its weights equal PipeDream's bit for
bit; it saves memory where a unit's parameters outweigh b x (its inputs + outputs)."""

from __future__ import annotations

from edgetrain.pipeline.roles import staged_runner

STORE = "pairs"  # how its stages keep their weights (:mod:`edgetrain.pipeline.stores`)
make_runner = staged_runner
