"""``[report] tensorboard = true``: TensorBoard event files under ``RUN/tensorboard/``, written
from the run's events as they arrive (the series of :mod:`edgetrain.report.scalars`), so
``tensorboard --logdir RUN/tensorboard`` follows a run in progress.

:func:`check_tensorboard` refuses the recipe before anything starts when the ``tensorboard``
package is missing; :func:`with_tensorboard` adds the sink to a run's observers. The sink
watches, it never stops a run: a write that fails is logged once and the sink goes quiet.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgetrain.comm.control import Event
from edgetrain.launch.driver import Observer, RunSetup
from edgetrain.launch.events import Fanout
from edgetrain.recipe import Recipe
from edgetrain.report.extras import TENSORBOARD
from edgetrain.report.scalars import MODEL_EVENTS, RunMeans, Scalar, epoch_scalars, model_scalars
from edgetrain.report.tb_events import EventWriter

log = logging.getLogger(__name__)

TENSORBOARD_DIR = "tensorboard"
FLUSH_S = 2.0  # how stale the files may be while a run goes


def check_tensorboard(recipe: Recipe) -> None:
    """Refuse ``[report] tensorboard = true`` without the package (exit 2, nothing started)."""
    if recipe.report.tensorboard:
        TENSORBOARD.require("[report] tensorboard = true")


def with_tensorboard(setup: RunSetup, observer: Observer | None) -> Observer | None:
    """``observer`` and, when the recipe asks for it, a :class:`TensorBoardSink` after it."""
    if not setup.recipe.report.tensorboard:
        return observer
    epoch_roles = setup.family.policy(setup.recipe).epoch_roles
    workers = [i for i, role in enumerate(setup.roles) if role.name in epoch_roles]
    again = setup.resume.epoch + 1 if setup.resume is not None else None  # its first epoch
    sink = TensorBoardSink(setup.run_dir.path / TENSORBOARD_DIR, workers, again)
    return Fanout([observer, sink])


class TensorBoardSink:
    """An observer that writes each epoch report, the run's means and the final model's as
    scalars; the run's ``end`` event closes the file. ``purge_step``: a resumed run's first
    epoch, from which its points replace the earlier attempt's."""

    def __init__(
        self, logdir: Path, epoch_workers: list[int], purge_step: int | None = None
    ) -> None:
        self.logdir = logdir
        self.purge_step = purge_step
        self.means = RunMeans(epoch_workers)
        self._writer: EventWriter | None = None
        self._broken = False  # failed, or closed at the run's end

    def on_event(self, event: Event, t: float) -> None:
        if self._broken or event.kind == "progress":
            return
        try:
            self._write(event)
        except Exception as exc:  # noqa: BLE001 - a watching tool must not stop the run
            self._broken = True
            log.warning("TensorBoard files in %s: %s; no more are written", self.logdir, exc)
            self._close()

    def _write(self, event: Event) -> None:
        row: Mapping[str, Any] = {**event.data, "event": event.kind, "worker": event.worker}
        points: list[Scalar] = [*epoch_scalars(row), *self.means.add(row)]
        if event.kind in (*MODEL_EVENTS, "end"):
            points += self.means.flush()
        if event.kind in MODEL_EVENTS:
            points += model_scalars(row, self.means.last_epoch)
        if points or event.kind == "started":
            if self._writer is None:
                self._writer = EventWriter(self.logdir, FLUSH_S, self.purge_step)
            self._writer.write(points)
        if event.kind == "end":
            self._broken = True  # the run is over: nothing more to write
            self._close()

    def _close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
