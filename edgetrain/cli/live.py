"""Live progress of a run in the terminal, and the summary table at its end."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from edgetrain.comm.control import Event, Role
from edgetrain.recipe import Recipe
from edgetrain.report.summary import human_bytes


class LiveProgress:
    """One progress bar per worker: epoch, loss, test accuracy and status.

    A bar counts steps from the run's first epoch, ``(epoch - 1) x steps per epoch`` plus the
    steps of the current one, and never moves back (a resumed run starts its bar where the
    checkpoint was). Workers of roles without epochs (parameter servers) show their status."""

    def __init__(self, recipe: Recipe, roles: Sequence[Role], console: Console) -> None:
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
        self.roles = dict(enumerate(roles))
        self.steps_per_epoch: dict[int, int] = {}
        self.completed: dict[int, int] = {}
        for i, g in enumerate(recipe.expanded_workers()):
            self.tasks[i] = self.progress.add_task(
                self._label(i, g.host),
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

    def _label(self, worker: int, host: str) -> str:
        role = self.roles.get(worker)
        what = f" {role.name}" if role is not None and role.name != "trainer" else ""
        return f"worker {worker}{what} [dim]{host} x{self.slowdown.get(worker, 1):g}[/]"

    def _update(self, worker: int | None, **fields: Any) -> None:
        if worker is None or worker not in self.tasks:
            return
        if "completed" in fields:  # a bar never moves back
            done = max(int(fields["completed"]), self.completed.get(worker, 0))
            self.completed[worker] = fields["completed"] = done
        self.progress.update(self.tasks[worker], **fields)

    def _position(self, worker: int, epoch: int, epoch_step: int) -> int:
        return max(0, epoch - 1) * self.steps_per_epoch.get(worker, 1) + epoch_step

    def on_event(self, event: Event, t: float) -> None:
        d, w = event.data, event.worker
        if w is None:
            self._on_run_event(event)
            return
        if event.kind == "registered":
            host = d.get("host")
            update: dict[str, Any] = {"status": "registered"}
            if host and w in self.slowdown:  # the host the worker really runs on
                update["description"] = self._label(w, str(host))
            self._update(w, **update)
        elif event.kind == "ready":
            spe = int(d.get("steps_per_epoch") or 1)
            self.steps_per_epoch[w] = spe
            self._update(w, status="ready", total=spe * self.epochs)
        elif event.kind == "progress":
            epoch = int(d.get("epoch", 0) or 0)
            loss = d.get("loss")
            self._update(
                w,
                completed=self._position(w, epoch, int(d.get("epoch_step", 0) or 0)),
                epoch=epoch,
                loss=f"{loss:.3f}" if isinstance(loss, (int, float)) else "-",
            )
        elif event.kind == "epoch":
            acc = d.get("test_accuracy")
            fields: dict[str, Any] = {
                "completed": int(d.get("epoch", 0) or 0) * self.steps_per_epoch.get(w, 1),
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
            acc = d.get("final_test_accuracy")
            shown = f"{acc:.3f}" if isinstance(acc, (int, float)) else "-"
            self._update(w, status="done", acc=shown)
        elif event.kind in ("error", "failed"):
            reason = d.get("message") or d.get("reason")
            self._update(w, status=f"[red]failed: {str(reason)[:40]}")

    def _on_run_event(self, event: Event) -> None:
        d = event.data
        if event.kind == "started":
            for wid in self.tasks:
                role = self.roles.get(wid)
                self._update(
                    wid, status="training" if role is None or role.name != "server" else "serving"
                )
        elif event.kind in ("waiting", "checkpoint_written", "resumed", "halt"):
            text = {
                "waiting": f"[yellow]{d.get('message')}",
                "checkpoint_written": f"[dim]checkpoint of epoch {d.get('epoch')} written",
                "resumed": f"resuming after epoch {d.get('epoch')} from its checkpoint",
                "halt": f"[red]stopping: {d.get('reason')}",
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
