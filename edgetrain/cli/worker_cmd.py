"""``edgetrain worker``: one process of a run; started by ``edgetrain launch``, not by hand."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer


def worker(
    coordinator: Annotated[str, typer.Option(help="Coordinator endpoint, tcp://HOST:PORT.")],
    worker_id: Annotated[int, typer.Option("--worker-id", min=0, help="This worker's id.")],
    run_id: Annotated[
        str, typer.Option("--run-id", help="The run's id (checked on every message).")
    ],
    role: Annotated[
        str | None,
        typer.Option(
            "--role",
            metavar="ROLE:INDEX",
            help="What this process runs (checked by the coordinator; default: what it says).",
        ),
    ] = None,
    host_label: Annotated[
        str | None, typer.Option("--host-label", help="Host name to report (default: hostname).")
    ] = None,
    bind: Annotated[
        str, typer.Option(help="Address to bind this worker's sockets to.")
    ] = "127.0.0.1",
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
    """Run one worker until the coordinator says stop.

    Example (what launch runs):
    edgetrain worker --coordinator tcp://127.0.0.1:5555 --worker-id 0 --run-id abc --role trainer:0
    """
    from edgetrain.comm.control import Role
    from edgetrain.errors import EdgetrainError
    from edgetrain.worker.main import Terminated, WorkerOptions, run_worker

    try:
        parsed = Role.parse(role) if role is not None else None
    except ValueError as exc:
        raise EdgetrainError(f"--role: {exc}", "write ROLE:INDEX, e.g. --role server:0") from None
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s w{worker_id} %(levelname)s %(message)s"
    )
    opts = WorkerOptions(
        coordinator, worker_id, run_id, parsed, host_label, bind, announce, watch_stdin, keys
    )
    try:
        code = run_worker(opts)
    except Terminated:  # a stop that landed between the worker's own handlers: no traceback
        code = 143
    raise typer.Exit(code)
