"""TensorBoard event files: scalars written through ``torch.utils.tensorboard`` (which needs the
``tensorboard`` package, an optional extra: :data:`edgetrain.report.extras.TENSORBOARD`).

``tensorboard --logdir DIR`` shows them; TensorBoard's own reader (``EventAccumulator``) reads
them back. A directory gets a new file per writer: a resumed run adds one beside the first,
opened with ``purge_step`` (the first epoch it trains again), which hides the earlier file's
points from that step on."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from edgetrain.report.scalars import Scalar

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


class EventWriter:
    """Appends scalars to a new event file in ``logdir`` (made if missing); ``purge_step``:
    the earlier files' points from this step on are superseded."""

    def __init__(self, logdir: Path, flush_s: float = 10.0, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        logdir.mkdir(parents=True, exist_ok=True)
        self._writer: SummaryWriter = SummaryWriter(
            log_dir=str(logdir), flush_secs=int(flush_s), purge_step=purge_step
        )
        self.written = 0

    def write(self, scalars: Iterable[Scalar]) -> None:
        for s in scalars:
            self._writer.add_scalar(s.tag, s.value, s.step, walltime=s.wall)
            self.written += 1

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
