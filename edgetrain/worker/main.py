"""A worker process from start to exit: register, set up, run its role, hand in, stop.

This module is the process lifecycle only; what a worker does is its technique's runner
(:mod:`edgetrain.techniques`). The process exits when the coordinator says stop, on
SIGTERM/SIGINT, or when its standard input closes (the launcher, or the ssh session that
started it, is gone): no worker outlives its run. Every failure after the coordinator client
exists (a socket that cannot bind, bad data, a diverging loss) travels back to the coordinator
as an ``error`` message before the process exits.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import zmq

from edgetrain import techniques
from edgetrain.comm import protocol
from edgetrain.comm.channel import Traffic
from edgetrain.comm.client import CoordinatorClient, StopRequested
from edgetrain.comm.control import HandIn, Role
from edgetrain.comm.security import SecurityConfig, load_keys
from edgetrain.comm.wire import DEFAULT_LIMITS, Limits, Message
from edgetrain.errors import Diverged, EdgetrainError
from edgetrain.recipe import parse_recipe
from edgetrain.runtime import determinism
from edgetrain.runtime.base import Runner, WorkerContext
from edgetrain.runtime.session import Session

log = logging.getLogger(__name__)

SETUP_TIMEOUT_S = 600.0
REDELIVER_AFTER_S = 0.02  # see _redeliver_lost_stop


class Terminated(BaseException):
    """SIGTERM or SIGINT arrived, or standard input closed.

    A ``BaseException``, like ``KeyboardInterrupt``: code that turns any ``Exception`` into
    its own error (a corrupt-file check around a data loader) must not swallow a stop."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Stop once. Later signals are ignored: a worker ended over ssh gets SIGTERM from the
    launcher and again from its own stdin watcher, and a second exception raised inside the
    clean-up would end it with a traceback."""
    _ignore_stops()
    raise Terminated(signal.Signals(signum).name)


def _ignore_stops() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


def install_stop_handlers() -> None:
    """SIGTERM and SIGINT raise :class:`Terminated` once (see :func:`_on_signal`).

    A signal handler runs wherever the main thread is, and that can be inside a native
    destructor: a ZeroMQ frame freed by Cython's ``__dealloc__`` calls back into Python, the
    handler raises there, and the exception cannot propagate out of a destructor. Python then
    prints it as "Exception ignored in ..." with a traceback, and the stop is lost while the
    handlers already ignore further signals. The unraisable hook installed here catches that
    one case and delivers the same signal again, so that it is raised outside the destructor
    (should it land in a destructor again, the same happens again); every other unraisable
    exception goes to Python's own hook.

    Cython prints a full traceback through ``sys.excepthook`` before it hands such an
    exception to the unraisable hook (pyzmq's ``_check_rc`` polls for signals where it cannot
    propagate one): the except hook installed here stays silent for a stop and passes every
    other exception to Python's own."""
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    sys.unraisablehook = _redeliver_lost_stop
    sys.excepthook = _quiet_stop


def _quiet_stop(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if isinstance(exc, Terminated):
        log.debug("a stop (%s) reached the except hook; no traceback printed", exc)
        return
    sys.__excepthook__(kind, exc, tb)


def _redeliver_lost_stop(unraisable: Any) -> None:
    exc = unraisable.exc_value
    if not isinstance(exc, Terminated):
        sys.__unraisablehook__(unraisable)
        return
    name = str(exc.args[0]) if exc.args else "SIGTERM"
    signum = signal.Signals[name] if name in signal.Signals.__members__ else signal.SIGTERM
    log.debug("%s arrived inside a destructor; delivering it again", name)
    threading.Thread(target=_deliver_later, args=(signum,), daemon=True).start()
    signal.signal(signum, _on_signal)  # last: nothing in this hook may take the signal


def _deliver_later(signum: int) -> None:
    """Send ``signum`` to this process once the main thread has left the destructor and the
    unraisable hook (sent from inside them, the handler would run there again)."""
    time.sleep(REDELIVER_AFTER_S)
    os.kill(os.getpid(), signum)


def _watch_stdin() -> None:
    """Ask this process to stop when standard input reaches end of file.

    Reads file descriptor 0 directly: a daemon thread blocked in ``sys.stdin``'s buffered
    reader would hold its lock and abort the interpreter at exit.
    """
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)


@dataclass(frozen=True)
class WorkerOptions:
    """How ``edgetrain worker`` was started (by the launcher)."""

    coordinator: str
    worker_id: int
    run_id: str
    role: Role | None = None  # None: the role the coordinator gives in ``welcome``
    host_label: str | None = None
    bind_host: str = "127.0.0.1"
    announce_host: str | None = None
    watch_stdin: bool = True
    keys_dir: Path | None = None
    secret: str | None = None  # the run's secret (the launcher writes it to standard input)
    limits: Limits = DEFAULT_LIMITS  # the run's message limits
    stacks: Path | None = None  # where SIGUSR1 writes this process's Python stacks


# The launcher sends this signal to a worker that stopped heartbeating, before it declares the
# worker lost: the Python stacks of all its threads are written at once (by faulthandler's C
# handler, which needs neither the interpreter lock nor the main thread).
STACKS_SIGNAL = signal.SIGUSR1


def install_stack_dump(path: Path | None) -> None:
    """Write every thread's Python stack to ``path`` (appending; None: standard error, which a
    launcher over ssh streams into the worker's log) whenever :data:`STACKS_SIGNAL` arrives."""
    out = sys.stderr
    if path is not None:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            out = path.open("a", buffering=1)  # kept open for the life of the process
    faulthandler.register(STACKS_SIGNAL, file=out, all_threads=True, chain=False)


SECRET_MAX_CHARS = 256


def read_secret() -> str:
    """The run's secret: the first line of standard input, where the launcher writes it (it
    never appears on a command line, where ``ps`` would show it to every user)."""
    data = b""
    while not data.endswith(b"\n") and len(data) <= SECRET_MAX_CHARS:
        chunk = os.read(0, 1)
        if not chunk:
            break
        data += chunk
    secret = data.decode("ascii", errors="replace").strip()
    if not data.endswith(b"\n") or not secret or len(secret) > SECRET_MAX_CHARS:
        raise EdgetrainError(
            "--secret-stdin: no run secret on standard input",
            "workers are started by `edgetrain launch`, which writes it there",
        )
    return secret


def _resume(welcome: Message) -> tuple[int, HandIn | None]:
    """The epoch a resumed run starts after, and this worker's hand-in; (0, None) when fresh."""
    resume = welcome.meta.get("resume")
    if not isinstance(resume, dict):
        return 0, None
    epoch, meta = resume.get("epoch"), resume.get("handin")
    if not isinstance(epoch, int) or epoch < 0 or not isinstance(meta, (dict, type(None))):
        raise EdgetrainError("the coordinator sent a malformed resume point")
    if meta is None:  # resumed, with no part of the checkpoint to restore
        return epoch, None
    return epoch, HandIn(dict(welcome.tensors), meta)


def run_worker(opts: WorkerOptions) -> int:
    """Run one worker to completion. Returns the process exit code.

    ``keys_dir`` turns CURVE on (the run's keys, see :mod:`edgetrain.comm.security`); unusable
    keys raise :class:`~edgetrain.comm.security.SecurityError` before anything starts.
    """
    keys = load_keys(SecurityConfig("curve", opts.keys_dir)) if opts.keys_dir else None
    install_stop_handlers()
    install_stack_dump(opts.stacks)
    if opts.watch_stdin:
        threading.Thread(target=_watch_stdin, daemon=True, name="stdin-watch").start()
    ctx = zmq.Context()
    traffic = Traffic()
    client = CoordinatorClient(
        ctx, opts.coordinator, opts.worker_id, opts.run_id, traffic, keys,
        secret=opts.secret, limits=opts.limits,
    )  # fmt: skip
    runner: Runner | None = None
    code = 0
    try:
        # Import torch before registering: a long import holds the interpreter lock and would
        # starve the heartbeat thread.
        import torch  # noqa: F401

        from edgetrain.runtime.torch_startup import skip_dynamo_import

        skip_dynamo_import()  # the optimizers' first calls would import the compiler (seconds)

        host = opts.host_label or socket.gethostname()
        register: dict[str, object] = {"host": host, "pid": os.getpid()}
        if opts.role is not None:
            register["role"] = str(opts.role)
        client.send(protocol.REGISTER, register)
        welcome = client.wait_for(protocol.WELCOME, SETUP_TIMEOUT_S, sync=False)
        recipe = parse_recipe(welcome.meta.get("recipe", {}), "recipe from the coordinator")
        role = Role.parse(str(welcome.meta.get("role", "")))
        client.start_heartbeat(recipe.run.heartbeat_s)
        # Before the role's set-up touches CUDA (where the coordinator allows for a slow start).
        determinism.apply(recipe.train.deterministic, recipe.train.blas_workspace)
        resume_epoch, resume = _resume(welcome)
        wctx = WorkerContext(
            recipe,
            opts.run_id,
            opts.worker_id,
            role,
            host,
            ctx,
            traffic,
            keys,
            opts.bind_host,
            opts.announce_host,
            resume,
            resume_epoch,
            opts.limits,
        )
        runner = techniques.runner_factory(recipe.train.family, recipe.train.technique)(wctx)
        ready = runner.setup()
        client.send(protocol.READY, {"endpoints": ready.endpoints, **ready.meta})
        start = client.wait_for(protocol.START, SETUP_TIMEOUT_S)
        session = Session(client, wctx, start)
        final = runner.run(session)
        steps = int(final.metrics.get("steps", 0) or 0)
        session.hand_in(final, recipe.train.epochs, steps)
        client.wait_for(protocol.STOP, SETUP_TIMEOUT_S)
    except StopRequested:
        log.info("stopped by the coordinator")
    except Terminated as exc:
        log.info("terminated (%s)", exc)
        code = 143
    except Diverged as exc:
        log.error("%s", exc)
        _report(client, str(exc), "diverged", epoch=exc.epoch, step=exc.step)
        code = 1
    except Exception as raised:  # noqa: BLE001 - failures travel back to the coordinator as data
        failure = determinism.explain(raised)  # an operation with no deterministic kernel
        message = (
            str(failure)
            if isinstance(failure, EdgetrainError)
            else f"{type(failure).__name__}: {failure}"
        )
        # A user's error (a bind address the host lacks, data missing there) is not a crash the
        # run should ride out: the launcher stops the run and exits with 2, as for bad input;
        # its line says all there is (no traceback), a crash's log keeps the traceback.
        user = isinstance(failure, EdgetrainError) and failure.exit_code == 2
        log.error("failed: %s%s", message, "" if user else "\n" + traceback.format_exc())
        _report(client, message, "input" if user else "error")
        code = 1
    finally:
        # Clean-up runs to its end: a stop arriving now (the launcher ends a failed run) would
        # only cut it short; sockets linger at most a few seconds to deliver the last report.
        _ignore_stops()
        if runner is not None:
            runner.close()
        client.close()
        ctx.term()
    return code


def _report(client: CoordinatorClient, message: str, kind: str, **extra: int) -> None:
    """Send a failure to the coordinator, if it can still be reached."""
    with contextlib.suppress(zmq.ZMQError, EdgetrainError):
        client.send(protocol.ERROR, {"message": message, "kind": kind, **extra})
