"""Live progress of a run in the terminal, and the summary table at its end."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TimeElapsedColumn
from rich.table import Column, Table
from rich.text import Text

from edgetrain.cli import live_rows
from edgetrain.comm.control import Event, Role
from edgetrain.recipe import Recipe
from edgetrain.report.summary import human_bytes


class _RowColumn(ProgressColumn):
    """One of a row's cells (:mod:`edgetrain.cli.live_rows`), worked out when it is drawn, so
    that the start-up time and the ETA tick between events."""

    def __init__(self, live: LiveProgress, cell: str, style: str = "") -> None:
        super().__init__(table_column=Column(no_wrap=True))
        self.live, self.cell, self.style = live, cell, style

    def render(self, task: Task) -> Text:
        cells = self.live.cells(int(task.fields["worker"]))
        text = str(getattr(cells, self.cell))
        failed = self.cell == "status" and text.startswith("failed")
        return Text(text, style="red" if failed else self.style)


class LiveProgress:
    """One progress bar per worker, in its role's words (:mod:`edgetrain.cli.live_rows`).

    Roles with epochs count steps from the run's first epoch and never move back (a resumed
    run starts its bar where the checkpoint was); a parameter server shows the pushes it served
    and the pulls it answered, a pipeline evaluator the snapshots it received and scored.
    Start-up is a phase of each row, with its time, rather than a warning."""

    def __init__(self, recipe: Recipe, roles: Sequence[Role], console: Console) -> None:
        self.epochs = recipe.train.epochs
        groups = recipe.expanded_workers()
        self.rows = live_rows.new_rows(
            [(r.name, r.index) for r in roles],
            [g.host for g in groups],
            [g.slowdown for g in groups],
            recipe.train.epochs,
            recipe.train.batch_size,
        )
        self.t0 = time.monotonic()  # the events' clock, corrected by the first event
        self.progress = Progress(
            _RowColumn(self, "label"),
            _RowColumn(self, "slow", "dim"),
            BarColumn(bar_width=20),
            _RowColumn(self, "detail"),
            _RowColumn(self, "status", "dim"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.tasks: dict[int, TaskID] = {
            i: self.progress.add_task("", total=None, worker=i) for i in self.rows
        }

    def __enter__(self) -> LiveProgress:
        if (line := live_rows.legend(self.rows)) is not None:
            self.progress.console.print(line, style="dim", markup=False, highlight=False)
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    @property
    def completed(self) -> dict[int, int]:
        """Each worker's bar position (steps)."""
        return {i: row.completed for i, row in self.rows.items()}

    def now(self) -> float:
        return time.monotonic() - self.t0

    def cells(self, worker: int) -> live_rows.Cells:
        return live_rows.cells(self.rows[worker], self.now())

    def _refresh(self, worker: int) -> None:
        total, completed = live_rows.bar(self.rows[worker])
        self.progress.update(self.tasks[worker], total=total, completed=completed)

    def on_event(self, event: Event, t: float) -> None:
        self.t0 = event.at - t
        w = event.worker
        if w is None:
            live_rows.apply_run(self.rows, event.kind, event.data, t)
            for wid in self.rows:
                self._refresh(wid)
            self._print_run_event(event)
        elif w in self.rows:
            live_rows.apply(self.rows[w], event.kind, event.data, t)
            self._refresh(w)
            if event.kind in ("restarted", "joined", "rejoin_refused", "join_refused"):
                self.progress.console.print(_membership_line(w, event.kind, event.data))

    def _print_run_event(self, event: Event) -> None:
        d = event.data
        text = {
            "waiting": f"[yellow]{d.get('message')}",
            "checkpoint_written": f"[dim]checkpoint of epoch {d.get('epoch')} written",
            "resumed": f"resuming after epoch {d.get('epoch')} from its checkpoint",
            "halt": f"[red]stopping: {d.get('reason')}",
            "rewound": f"[green]the run went back to the checkpoint of epoch {d.get('epoch')} "
            f"with {', '.join(f'worker {w}' for w in d.get('back') or [])}",
        }.get(event.kind)
        if text is not None:
            self.progress.console.print(text)


def _membership_line(worker: int, kind: str, data: Mapping[str, Any]) -> str:
    """The line above the rows when a lost worker comes back (or cannot)."""
    if kind == "restarted" and data.get("new"):
        return f"a new worker started in open slot {worker} by edgetrain join on {data.get('host')}"
    if kind == "restarted" and data.get("by") == "join":
        return f"worker {worker} started again by edgetrain join on {data.get('host')}"
    if kind == "restarted":
        return f"worker {worker} restarted (restart {data.get('attempt')})"
    if kind == "join_refused":
        return f"[yellow]edgetrain join refused for worker {worker}: {data.get('reason')}"
    if kind == "joined":
        return f"[green]worker {worker} rejoined the run at epoch {data.get('epoch')}"
    return f"[yellow]worker {worker} could not rejoin: {data.get('reason')}"


def summary_table(summary: dict[str, Any]) -> Table:
    """The table ``launch`` and ``report`` end with."""
    status = summary.get("status")
    colour = "green" if status == "completed" else "red"
    wall = summary.get("wall_s")
    wall_txt = f"{wall:.1f} s" if isinstance(wall, (int, float)) else "-"
    table = Table(
        title=f"{summary.get('name')}: [{colour}]{status}[/]  wall {wall_txt}",
        caption=f"{summary.get('family')}/{summary.get('technique')} · {summary.get('model')} "
        f"on {summary.get('dataset')} · {summary.get('epochs')} epochs · training "
        + (f"{train:.1f} s" if isinstance(train := summary.get("train_s"), (int, float)) else "-"),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in ("worker", "role", "host", "slow", "status", "test acc", "steps", "sent", "recv"):
        left = col in ("role", "host", "status")
        table.add_column(col, justify="left" if left else "right", no_wrap=True)
    for w in summary.get("workers", []):
        acc = w.get("final_test_accuracy")
        table.add_row(
            str(w["id"]),
            str(w.get("role", "trainer")),
            str(w["host"]),
            f"{w.get('slowdown', 1):g}",
            str(w["status"]),
            f"{acc:.4f}" if isinstance(acc, (int, float)) else "-",
            str(w.get("steps", 0)),
            human_bytes(w.get("bytes_sent")),
            human_bytes(w.get("bytes_received")),
        )
    avg = summary.get("test_accuracy")
    averaged = summary.get("averaged_test_accuracy") is not None
    table.add_section()
    table.add_row(
        "avg" if averaged else "model",
        "",
        "",
        "",
        "averaged" if averaged else "final",
        f"[bold]{avg:.4f}[/]" if isinstance(avg, (int, float)) else "-",
        "",
        human_bytes(summary.get("bytes_sent")),
        human_bytes(summary.get("bytes_received")),
    )
    return table
