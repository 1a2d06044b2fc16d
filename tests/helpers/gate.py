"""Workers that train slowly until a gate opens: each gossip (GoSGD, DLion, Gaia, Ako) or
parameter-server trainer or Mercury device step, each pipeline stage's backward and each
data-parallel replica's all-reduce sleeps
``EDGETRAIN_TEST_GATE_SLEEP_S`` (default 0.05 s) while the file ``EDGETRAIN_TEST_GATE`` does
not exist, so a test can keep a run going while it waits for an event (a restarted worker's
rejoin) and then let it finish at full speed, without guessing how long either takes.

Loaded into workers through ``EDGETRAIN_PLUGINS=tests.helpers.gate`` (it adds nothing to the
registry)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any


def _install() -> None:
    from edgetrain.gossip.exchange.loop import Decentral
    from edgetrain.gossip.gosgd import GoSGD
    from edgetrain.ps.mercury.device import MercuryDevice
    from edgetrain.ps.scheduled import ScheduledTrainer

    gate = Path(os.environ["EDGETRAIN_TEST_GATE"])
    pause = float(os.environ.get("EDGETRAIN_TEST_GATE_SLEEP_S", "0.05"))
    for cls in (GoSGD, ScheduledTrainer, Decentral, MercuryDevice):
        step = cls.step

        def gated(self: Any, epoch: int, batch: Any, step: Any = step) -> float:
            if not gate.exists():
                time.sleep(pause)
            return float(step(self, epoch, batch))

        cls.step = gated  # type: ignore[method-assign]

    from edgetrain.pipeline.stage import StageRunner

    backward = StageRunner._backward

    def gated_backward(self: Any, epoch: int, j: int) -> None:
        if not gate.exists():
            time.sleep(pause)
        backward(self, epoch, j)

    StageRunner._backward = gated_backward  # type: ignore[method-assign]

    from edgetrain.pipeline.replica import ReplicaRunner

    allreduce = ReplicaRunner._allreduce

    def gated_allreduce(self: Any, *args: Any) -> Any:
        if not gate.exists():
            time.sleep(pause)
        return allreduce(self, *args)

    ReplicaRunner._allreduce = gated_allreduce  # type: ignore[method-assign]


if sys.argv[1:2] == ["worker"] and os.environ.get("EDGETRAIN_TEST_GATE"):
    _install()
