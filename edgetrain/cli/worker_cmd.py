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
    secret_stdin: Annotated[
        bool,
        typer.Option(
            "--secret-stdin", help="Read the run's secret from the first line of standard input."
        ),
    ] = False,
    max_message_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-message-bytes", min=1, help="The largest message the run sends (bytes)."
        ),
    ] = None,
    max_tensors: Annotated[
        int | None, typer.Option("--max-tensors", min=1, help="The most tensors in a message.")
    ] = None,
    stacks: Annotated[
        Path | None,
        typer.Option(help="Write Python stacks here on SIGUSR1 (default: standard error)."),
    ] = None,
) -> None:
    """Run one worker until the coordinator says stop.

    Example (what launch runs):
    edgetrain worker --coordinator tcp://127.0.0.1:5555 --worker-id 0 --run-id abc --role trainer:0
    """
    from edgetrain.comm.control import Role
    from edgetrain.comm.wire import DEFAULT_LIMITS, MAX_TENSORS, Limits
    from edgetrain.errors import EdgetrainError
    from edgetrain.worker.main import Terminated, WorkerOptions, read_secret, run_worker

    try:
        parsed = Role.parse(role) if role is not None else None
    except ValueError as exc:
        raise EdgetrainError(f"--role: {exc}", "write ROLE:INDEX, e.g. --role server:0") from None
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s w{worker_id} %(levelname)s %(message)s"
    )
    limits = Limits(
        max_message_bytes or DEFAULT_LIMITS.message_bytes,
        min(max_tensors or MAX_TENSORS, MAX_TENSORS),
    )
    secret = read_secret() if secret_stdin else None
    opts = WorkerOptions(
        coordinator, worker_id, run_id, parsed, host_label, bind, announce, watch_stdin, keys,
        secret, limits, stacks,
    )  # fmt: skip
    try:
        code = run_worker(opts)
    except Terminated:  # a stop that landed between the worker's own handlers: no traceback
        code = 143
    raise typer.Exit(code)
