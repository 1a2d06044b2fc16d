"""``edgetrain worker``: one training worker; started by ``edgetrain launch``, not by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def worker(
    coordinator: Annotated[str, typer.Option(help="Coordinator endpoint, tcp://HOST:PORT.")],
    worker_id: Annotated[int, typer.Option("--worker-id", min=0, help="This worker's id.")],
    run_id: Annotated[
        str, typer.Option("--run-id", help="The run's id (checked on every message).")
    ],
    host_label: Annotated[
        str | None, typer.Option("--host-label", help="Host name to report (default: hostname).")
    ] = None,
    bind: Annotated[str, typer.Option(help="Address to bind the gossip inbox to.")] = "127.0.0.1",
    announce: Annotated[
        str | None, typer.Option(help="Address peers use to reach this worker (default: --bind).")
    ] = None,
    watch_stdin: Annotated[
        bool, typer.Option(help="Exit when standard input closes (the launcher is gone).")
    ] = True,
    keys: Annotated[
        Path | None,
        typer.Option(
            help="The run's CURVE keys directory (edgetrain keys generate); turns on CURVE."
        ),
    ] = None,
) -> None:
    """Run one training worker until the coordinator says stop.

    Example (what launch runs):
    edgetrain worker --coordinator tcp://127.0.0.1:5555 --worker-id 0 --run-id abc123
    """
    from edgetrain.worker.main import run_worker

    code = run_worker(
        coordinator, worker_id, run_id, host_label, bind, announce, watch_stdin, keys_dir=keys
    )
    raise typer.Exit(code)
