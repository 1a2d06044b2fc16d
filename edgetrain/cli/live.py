"""Live progress of a run in the terminal, and the summary table at its end."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from edgetrain.comm.coordinator import Event
from edgetrain.recipe import Recipe
from edgetrain.report.summary import human_bytes


class LiveProgress:
    """One progress bar per worker: epoch, loss, test accuracy and status."""

    def __init__(self, recipe: Recipe, console: Console) -> None:
        self.epochs = recipe.train.epochs
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=28),
            TextColumn("epoch {task.fields[epoch]}/{task.fields[epochs]}"),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("acc {task.fields[acc]}"),
            TextColumn("[dim]{task.fields[status]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.tasks: dict[int, TaskID] = {}
        self.slowdown = {i: g.slowdown for i, g in enumerate(recipe.expanded_workers())}
        self.steps_per_epoch: dict[int, int] = {}
        for i, g in enumerate(recipe.expanded_workers()):
            self.tasks[i] = self.progress.add_task(
                f"worker {i} [dim]{g.host} x{g.slowdown:g}[/]",
                total=self.epochs,
                epoch=0,
                epochs=self.epochs,
                loss="-",
                acc="-",
                status="starting",
            )

    def __enter__(self) -> LiveProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def _update(self, worker: int, **fields: Any) -> None:
        if worker in self.tasks:
            self.progress.update(self.tasks[worker], **fields)

    def on_event(self, event: Event, t: float) -> None:
        d, w = event.data, event.worker
        if event.kind == "registered":
            host = d.get("host")
            update: dict[str, Any] = {"status": "registered"}
            if host and w in self.slowdown:  # the host the worker really runs on
                update["description"] = f"worker {w} [dim]{host} x{self.slowdown[w]:g}[/]"
            self._update(w, **update)
        elif event.kind == "ready":
            spe = int(d.get("steps_per_epoch") or 1)
            self.steps_per_epoch[w] = spe
            self._update(w, status="ready", total=spe * self.epochs)
        elif event.kind == "started":
            for wid in self.tasks:
                self._update(wid, status="training")
        elif event.kind == "progress":
            self._update(
                w,
                completed=d.get("step", 0),
                epoch=d.get("epoch", 0),
                loss=f"{d.get('loss', 0):.3f}",
            )
        elif event.kind == "epoch":
            acc = d.get("test_accuracy")
            fields: dict[str, Any] = {
                "completed": d.get("epoch", 0) * self.steps_per_epoch.get(w, 1),
                "epoch": d.get("epoch", 0),
            }
            if d.get("loss") is not None:
                fields["loss"] = f"{d['loss']:.3f}"
            if acc is not None:
                fields["acc"] = f"{acc:.3f}"
            self._update(w, **fields)
        elif event.kind == "done":
            self._update(w, status="draining")
        elif event.kind == "final":
            self._update(w, status="done", acc=f"{d.get('final_test_accuracy', 0):.3f}")
        elif event.kind in ("error", "failed"):
            reason = d.get("message") or d.get("reason")
            self._update(w, status=f"[red]failed: {str(reason)[:40]}")
        elif event.kind in ("waiting", "checkpoint_written", "resumed"):
            text = {
                "waiting": f"[yellow]{d.get('message')}",
                "checkpoint_written": f"[dim]checkpoint of epoch {d.get('epoch')} written",
                "resumed": f"resuming after epoch {d.get('epoch')} from its checkpoint",
            }[event.kind]
            self.progress.console.print(text)


def summary_table(summary: dict[str, Any]) -> Table:
    """The table ``launch`` and ``report`` end with."""
    status = summary.get("status")
    colour = "green" if status == "completed" else "red"
    wall = summary.get("wall_s")
    wall_txt = f"{wall:.1f} s" if isinstance(wall, (int, float)) else "-"
    table = Table(
        title=f"{summary.get('name')}: [{colour}]{status}[/]  wall {wall_txt}",
        caption=f"{summary.get('technique')}/{summary.get('algorithm')} · {summary.get('model')} "
        f"on {summary.get('dataset')} · {summary.get('epochs')} epochs",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in ("worker", "host", "slow", "status", "test acc", "steps", "sent", "recv"):
        left = col in ("host", "status")
        table.add_column(col, justify="left" if left else "right", no_wrap=True)
    for w in summary.get("workers", []):
        acc = w.get("final_test_accuracy")
        table.add_row(
            str(w["id"]),
            str(w["host"]),
            f"{w.get('slowdown', 1):g}",
            str(w["status"]),
            f"{acc:.4f}" if isinstance(acc, (int, float)) else "-",
            str(w.get("steps", 0)),
            human_bytes(w.get("bytes_sent")),
            human_bytes(w.get("bytes_received")),
        )
    avg = summary.get("averaged_test_accuracy")
    table.add_section()
    table.add_row(
        "avg",
        "",
        "",
        "averaged",
        f"[bold]{avg:.4f}[/]" if isinstance(avg, (int, float)) else "-",
        "",
        human_bytes(summary.get("bytes_sent")),
        human_bytes(summary.get("bytes_received")),
    )
    return table
