"""``edgetrain runs``, ``status`` and ``logs``: watch runs, finished or in progress, from their
run directories."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit, err_console

FOLLOW_POLL_S = 0.2  # logs -f: how often the log files are read again (it is a tail)

_STATUS_STYLE = {
    "running": "cyan",
    "completed": "green",
    "failed": "red",
    "diverged": "red",
    "interrupted": "yellow",
    "unreadable": "red",
}


def _acc(x: Any) -> str:
    return f"{x:.4f}" if isinstance(x, (int, float)) else "-"


def _seconds(x: Any) -> str:
    if not isinstance(x, (int, float)):
        return "-"
    return f"{x:.1f} s" if x < 120 else f"{int(x) // 60} min {int(x) % 60:02d} s"


def _styled(status: str) -> str:
    style = _STATUS_STYLE.get(status.split(":")[0])
    return f"[{style}]{status}[/]" if style else status


def runs(
    runs_root: Annotated[
        Path | None,
        typer.Option(
            "--runs-root",
            metavar="DIR",
            help="The directory runs were launched into (launch's --runs-root; default: runs).",
        ),
    ] = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """List every run under the runs root, newest first: status (running, completed, failed,
    interrupted), family/technique, epochs done, final test accuracy, wall time and path.

    A run whose launcher died without recording an end is shown as interrupted; a manifest
    that cannot be read is listed as unreadable, with the reason.

    Examples:
    edgetrain runs
    edgetrain runs --runs-root /data/runs --format json
    """
    from edgetrain.errors import EdgetrainError
    from edgetrain.report.runs import list_runs

    root = (runs_root or Path("runs")).expanduser()
    if root.exists() and not root.is_dir():
        raise EdgetrainError(f"--runs-root '{root}' is not a directory", "pass the runs directory")
    if runs_root is not None and not root.exists():
        raise EdgetrainError(
            f"--runs-root '{root}' not found", "pass the directory launch wrote runs into"
        )
    rows = list_runs(root) if root.is_dir() else []
    emit(rows, fmt, lambda: _render_runs(rows, root))


def _render_runs(rows: list[dict[str, Any]], root: Path) -> None:
    if not rows:
        console.print(
            f"no runs under {root}/; start one with: edgetrain launch recipes/quickstart.toml"
        )
        return
    table = Table(box=box.SIMPLE_HEAD, title=f"runs under {root}/, newest first")
    for col in ("name", "status", "family/technique", "epochs", "test acc", "wall", "path"):
        table.add_column(col, justify="right" if col in ("epochs", "test acc", "wall") else "left")
    for r in rows:
        if r["status"] == "unreadable":
            table.add_row(
                "?",
                _styled("unreadable"),
                f"[red]{escape(str(r['reason']))}",
                "",
                "",
                "",
                escape(r["path"]),
            )
            continue
        epochs = f"{r['epochs_done']}/{r['epochs'] if r['epochs'] is not None else '?'}"
        table.add_row(
            escape(str(r["name"])),
            _styled(r["status"]),
            f"{r['family']}/{r['technique']}",
            epochs,
            _acc(r["test_accuracy"]),
            _seconds(r["wall_s"]),
            escape(r["path"]),
        )
    console.print(table)
    for r in rows:
        if r["status"] == "interrupted" and r.get("reason"):
            console.print(
                f"[yellow]{escape(r['path'])}[/]: {escape(str(r['reason']))}; continue it with: "
                f"edgetrain launch --resume {escape(r['path'])}"
            )


def _open(run: Path) -> Any:
    from edgetrain.rundir import RunDir

    return RunDir.open(run.expanduser())


def status(
    run: Annotated[Path, typer.Argument(metavar="RUN", help="A run directory.")],
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Show one run in detail, a run in progress too: its phase (starting, training epoch k
    of N, draining, done) and, per worker, its role, host, last epoch reported, last loss and
    test accuracy, and how long ago it last reported.

    Examples:
    edgetrain status runs/quickstart-20261122-101500
    edgetrain status runs/quickstart-20261122-101500 --format json
    """
    from edgetrain.report.runs import run_state

    state = run_state(_open(run)).as_dict()
    emit(state, fmt, lambda: _render_status(state))


def _render_status(s: dict[str, Any]) -> None:
    phase = s["phase"] if s["phase"] != "done" else f"done ({s['status']})"
    console.print(
        f"[bold]{escape(str(s['name']))}[/] {s['family']}/{s['technique']}  "
        f"{_styled(s['status'])}  "
        f"phase: {phase}  wall {_seconds(s['wall_s'])}"
    )
    if s.get("reason"):
        resume = f"; continue it with: edgetrain launch --resume {escape(s['path'])}"
        console.print(
            f"[yellow]{escape(str(s['reason']))}{resume if s['status'] == 'interrupted' else ''}"
        )
    table = Table(box=box.SIMPLE_HEAD)
    doing = any(w.get("doing") for w in s["workers"])
    cols = ("worker", "role", "host", "state", "epoch", "loss", "test acc", "reported")
    for col in (*cols, "doing") if doing else cols:
        table.add_column(col, justify="right" if col in ("epoch", "loss", "test acc") else "left")
    epochs = s["epochs"] if s["epochs"] is not None else "?"
    for w in s["workers"]:
        ago = w["reported_s_ago"]
        extra = [escape(doing_text(w.get("doing")))] if doing else []
        table.add_row(
            str(w["id"]),
            w["role"],
            escape(str(w["host"])),
            _styled(escape(str(w["state"]))),
            f"{w['epoch']}/{epochs}" if w["epoch"] is not None else f"-/{epochs}",
            f"{w['loss']:.3f}" if w["loss"] is not None else "-",
            _acc(w["test_accuracy"]),
            f"{_seconds(ago)} ago" if ago is not None else "never",
            *extra,
        )
    console.print(table)
    from edgetrain.report.runs import membership_text

    for m in s.get("membership") or []:  # [run] restart: who left and who joined, when
        console.print(escape(membership_text(m)))
    console.print(f"[dim]{escape(s['path'])}")


def doing_text(doing: dict[str, Any] | None) -> str:
    """``waiting 12 s on worker 2 (grad of iteration 40)``, or the phase. Pure."""
    if not doing:
        return "-"
    if doing.get("on"):
        waited = doing.get("for_s")
        spent = f" {_seconds(waited)}" if isinstance(waited, (int, float)) else ""
        return f"{doing.get('phase')}: waiting{spent} on {doing['on']} ({doing.get('what')})"
    return str(doing.get("phase"))


def logs(
    run: Annotated[Path, typer.Argument(metavar="RUN", help="A run directory.")],
    worker: Annotated[
        int | None,
        typer.Option("--worker", "-w", metavar="N", help="Only worker N's log."),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Keep printing new lines until the run ends (or Ctrl-C)."
        ),
    ] = False,
) -> None:
    """Print a run's worker logs (logs/worker-N.log), each line prefixed with its worker.

    With -f, keep following them, like tail -f, until the run ends; Ctrl-C stops earlier.

    Examples:
    edgetrain logs runs/quickstart-20261122-101500
    edgetrain logs runs/quickstart-20261122-101500 --worker 2 -f
    """
    from edgetrain.errors import EdgetrainError
    from edgetrain.report.runs import LogTail, ended, worker_ids
    from edgetrain.rundir import worker_stem

    rd = _open(run)
    ids = worker_ids(rd.read_manifest())
    if worker is not None and worker not in ids:
        known = f"{ids[0]}..{ids[-1]}" if ids else "none"
        raise EdgetrainError(
            f"run '{rd.path}' has no worker {worker}", f"pass --worker N with N in {known}"
        )
    chosen = [worker] if worker is not None else ids
    tail = LogTail({f"worker {i}": rd.log_file(worker_stem(i)) for i in chosen})
    _print_lines(tail.read(final=not follow))
    if not follow:
        missing = [i for i in chosen if not rd.log_file(worker_stem(i)).is_file()]
        if missing:
            err_console.print(f"no log yet for worker(s) {', '.join(map(str, missing))}")
        return
    while True:
        over = ended(rd.read_manifest())
        _print_lines(tail.read(final=over))
        if over:
            return
        time.sleep(FOLLOW_POLL_S)


def _print_lines(lines: list[tuple[str, str]]) -> None:
    for label, line in lines:
        sys.stdout.write(f"{label} | {line}\n")
    sys.stdout.flush()
