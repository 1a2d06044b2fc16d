"""A worker process from start to exit: register, set up, train, hand in, stop.

The process exits when the coordinator says stop, on SIGTERM/SIGINT, or when its standard input
closes (the launcher, or the ssh session that started it, is gone): no worker outlives its run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import traceback
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import zmq

from edgetrain.comm import protocol
from edgetrain.comm.channel import Traffic
from edgetrain.comm.security import SecurityConfig, load_keys
from edgetrain.comm.wire import Message
from edgetrain.errors import EdgetrainError
from edgetrain.recipe import Recipe, parse_recipe
from edgetrain.worker.client import CoordinatorClient, StopRequested

if TYPE_CHECKING:
    from edgetrain.gossip.gosgd import GoSGD
    from edgetrain.gossip.node import GossipNode

log = logging.getLogger(__name__)

SETUP_TIMEOUT_S = 600.0


class Terminated(Exception):
    """SIGTERM or SIGINT arrived, or standard input closed."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Stop once. Later signals are ignored: a worker ended over ssh gets SIGTERM from the
    launcher and again from its own stdin watcher, and a second exception raised inside the
    clean-up would end it with a traceback."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signal.Signals(signum).name)


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


def _build(
    recipe: Recipe,
    worker_id: int,
    client: CoordinatorClient,
    node: GossipNode,
    start_epoch: int = 1,
) -> GoSGD:
    """Load this worker's partition, build the model and the technique's runner."""
    import torch

    from edgetrain.gossip.gosgd import GoSGD
    from edgetrain.worker.setup import build_run_model, load_run_data, worker_indices
    from edgetrain.worker.trainer import LocalTrainer, resolve_device

    group = recipe.expanded_workers()[worker_id]
    torch.set_num_threads(group.threads)
    data = load_run_data(recipe)
    mine = worker_indices(recipe, data, worker_id)
    model = build_run_model(recipe, data)
    trainer = LocalTrainer(
        model,
        data.x_train[mine],
        data.y_train[mine],
        data.x_test,
        data.y_test,
        recipe.train,
        recipe.run.seed,
        worker_id,
        group.slowdown,
        resolve_device(recipe.train.device),
    )
    log.info(
        "%d training samples, model %s on %s, slowdown %.2f",
        len(mine),
        recipe.model.name,
        trainer.device,
        group.slowdown,
    )
    return GoSGD(
        trainer,
        node,
        client,
        recipe.gossip,
        recipe.num_workers,
        recipe.train.epochs,
        recipe.train.eval_every,
        recipe.run.seed,
        checkpoint_every=recipe.run.checkpoint_every,
        start_epoch=start_epoch,
    )


def _resume_point(welcome: Message) -> tuple[int, float] | None:
    """The (epoch, alpha) a resumed run starts from, from ``welcome``; None for a fresh run."""
    resume = welcome.meta.get("resume")
    if not isinstance(resume, dict):
        return None
    epoch, alpha = resume.get("epoch"), resume.get("alpha")
    if not isinstance(epoch, int) or epoch < 0 or not isinstance(alpha, (int, float)):
        raise EdgetrainError("the coordinator sent a malformed resume point")
    return epoch, float(alpha)


def run_worker(
    coordinator: str,
    worker_id: int,
    run_id: str,
    host_label: str | None = None,
    bind_host: str = "127.0.0.1",
    announce_host: str | None = None,
    watch_stdin: bool = True,
    keys_dir: Path | None = None,
) -> int:
    """Run one worker to completion. Returns the process exit code.

    ``keys_dir`` turns CURVE on (the run's keys, see :mod:`edgetrain.comm.security`); unusable
    keys raise :class:`~edgetrain.comm.security.SecurityError` before anything starts.
    """
    from edgetrain.gossip.node import GossipNode

    keys = load_keys(SecurityConfig("curve", keys_dir)) if keys_dir is not None else None

    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s w{worker_id} %(levelname)s %(message)s"
    )
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    if watch_stdin:
        threading.Thread(target=_watch_stdin, daemon=True, name="stdin-watch").start()
    ctx = zmq.Context()
    traffic = Traffic()
    client = CoordinatorClient(ctx, coordinator, worker_id, run_id, traffic, keys)
    node = GossipNode(ctx, worker_id, run_id, traffic, bind_host, announce_host, keys=keys)
    code = 0
    try:
        # Import torch before registering: a long import holds the interpreter lock and would
        # starve the heartbeat thread.
        import torch  # noqa: F401

        client.send(
            protocol.REGISTER,
            {
                "endpoint": node.endpoint,
                "host": host_label or socket.gethostname(),
                "pid": os.getpid(),
            },
        )
        welcome = client.wait_for(protocol.WELCOME, SETUP_TIMEOUT_S)
        recipe = parse_recipe(welcome.meta.get("recipe", {}), "recipe from the coordinator")
        client.start_heartbeat(recipe.run.heartbeat_s)
        resume = _resume_point(welcome)
        runner = _build(recipe, worker_id, client, node, resume[0] + 1 if resume else 1)
        if resume is not None:
            runner.load_checkpoint(welcome.tensors, resume[1])
            log.info("resuming after epoch %d with alpha %.4f", resume[0], resume[1])
        client.send(
            protocol.READY,
            {
                "samples": runner.trainer.num_samples,
                "steps_per_epoch": runner.trainer.steps_per_epoch,
            },
        )
        start = client.wait_for(protocol.START, SETUP_TIMEOUT_S)
        peers = start.meta.get("peers", {})
        node.connect({int(k): str(v) for k, v in peers.items() if str(k).isdigit()})
        runner.train()
        runner.finish()
        client.wait_for(protocol.STOP, SETUP_TIMEOUT_S)
    except StopRequested:
        log.info("stopped by the coordinator")
    except Terminated as exc:
        log.info("terminated (%s)", exc)
        code = 143
    except Exception as exc:  # noqa: BLE001 - failures travel back to the coordinator as data
        message = str(exc) if isinstance(exc, EdgetrainError) else f"{type(exc).__name__}: {exc}"
        log.error("failed: %s\n%s", message, traceback.format_exc())
        with contextlib.suppress(zmq.ZMQError):
            client.send(protocol.ERROR, {"message": message})
        code = 1
    finally:
        node.close()
        client.close()
        ctx.term()
    return code
