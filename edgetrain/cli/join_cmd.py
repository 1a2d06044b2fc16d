"""``edgetrain join RUN --worker ID [-H HOST]``: start a lost worker again and let it rejoin the
running run (through the run's launcher: :mod:`edgetrain.launch.join`)."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit
from edgetrain.errors import EdgetrainError


def join(
    run: Annotated[Path, typer.Argument(metavar="RUN", help="The running run's directory.")],
    worker: Annotated[
        int,
        typer.Option("--worker", "-w", metavar="ID", help="The lost worker to start again."),
    ],
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            "-H",
            metavar="HOST",
            help="Start it on this host of the run's hosts file (default: where it ran).",
        ),
    ] = None,
    wait_s: Annotated[
        float,
        typer.Option(
            "--wait-s", metavar="SECONDS", help="How long to wait for the launcher's answer."
        ),
    ] = 30.0,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Start a worker the run lost (its process died, or its host rebooted) again, and let it
    rejoin the running run with live state: a gossip worker takes the current model from a
    peer, a parameter-server trainer pulls the shards' current parameters. The run's launcher
    starts it, on its own host or on HOST, with the run's secret (which never leaves the
    launcher); this command asks it and prints its answer. The worker re-enters at the next
    epoch boundary: watch it with edgetrain status RUN.

    A new worker joins the same way: with join_slots = N in the recipe's run
    section, the recipe's last N trainers start as open slots, and
    edgetrain join RUN --worker ID fills one (GoSGD and the scheduled
    parameter-server techniques).

    With restart = N in the recipe's run section, the launcher does this
    by itself; join works with or without it, for the techniques that
    take workers back (GoSGD, EdgeGossip and the scheduled parameter-server
    trainers: edgetrain check refuses restart = N for the others).

    Examples:
    edgetrain join runs/gossip-20261127-101500 --worker 2
    edgetrain join runs/gossip-20261127-101500 --worker 2 -H jetson-b
    edgetrain join runs/gossip-20261128-061500 --worker 3 -H jetson-d   (an open slot)
    """
    from edgetrain.launch import join as joining
    from edgetrain.report.runs import launcher_alive, run_status
    from edgetrain.rundir import RunDir

    if not math.isfinite(wait_s) or wait_s <= 0:
        raise EdgetrainError(f"--wait-s {wait_s} is not a positive number of seconds", "use 30")
    rd = RunDir.open(run.expanduser())
    manifest = rd.read_manifest()
    path = str(rd.path)
    status, _ = run_status(manifest)
    if status != "running":
        raise EdgetrainError(
            f"run {path} is {status}: a worker joins only a running run",
            f"continue a stopped run from its last checkpoint: edgetrain launch --resume {path}",
        )
    if launcher_alive(manifest) is None:
        raise EdgetrainError(
            f"run {path}'s launcher runs on host {manifest.get('launcher_host')}",
            "run edgetrain join there, where the launcher can be asked",
        )
    workers = manifest.get("workers")
    count = len(workers) if isinstance(workers, list) else 0
    if not 0 <= worker < count:
        raise EdgetrainError(
            f"worker {worker} is not in the run (it has workers 0-{count - 1})",
            f"pick a worker from edgetrain status {path}",
        )
    _check_technique(manifest, path)
    req = joining.write_request(rd.path, worker, host)
    answer = joining.wait_answer(rd.path, req, wait_s, alive=lambda: launcher_alive(manifest))
    if answer is None:
        with contextlib.suppress(OSError):  # taken back: a late launcher must not act on it
            joining.request_path(rd.path, worker).unlink()
            joining.control_dir(rd.path).rmdir()  # where it is empty
        raise EdgetrainError(
            f"the run's launcher did not answer within {wait_s:g} s",
            f"check that it still runs (edgetrain status {path}), or wait longer (--wait-s)",
        )
    if not answer.get("accepted"):
        raise EdgetrainError(str(answer.get("error")), str(answer.get("fix") or "") or None)
    answer.pop("nonce", None)
    emit(answer, fmt, lambda: _render(answer, path))


def _check_technique(manifest: dict[str, Any], path: str) -> None:
    """Refuse at once where the run's technique cannot take a worker back."""
    from edgetrain import techniques
    from edgetrain.launch.join import verdict

    family, technique = manifest.get("family"), manifest.get("technique")
    if not isinstance(family, str) or not isinstance(technique, str):
        return  # the launcher decides
    try:
        runner = techniques.runner_factory(family, technique)
    except (EdgetrainError, KeyError, ValueError, ImportError):
        return
    refusal = verdict(
        0,
        rejoins=bool(getattr(runner, "rejoins", False)),
        what=f"{family}/{technique}",
        phase="training",
        status="failed",
        error_kind=None,
        mending=False,
        running=False,
        host=None,
        hosts=(),
        path=path,
    )
    if refusal is not None:
        raise EdgetrainError(refusal.reason, refusal.fix)


def _render(answer: dict[str, Any], path: str) -> None:
    w, host = answer["worker"], escape(str(answer["host"]))
    if answer.get("new"):
        what = f"a new worker started in open slot {w} on {host} (pid {answer['pid']}): it joins"
    else:
        what = f"worker {w} started again on {host} (pid {answer['pid']}): it rejoins"
    console.print(
        f"{what} at the next epoch boundary; watch it with: edgetrain status {escape(path)}"
    )
