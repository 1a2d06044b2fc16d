"""Control messages between workers and the coordinator, and the order they come in.

Only the control plane lives here; traffic between workers (gossip pushes, pulls and pushes,
activations and errors) is declared by each family in its own package.

worker                                  coordinator
register {host, pid, role}          ->
                                    <-  welcome {recipe, num_workers, role, resume?} (+ weights)
(load data, build model, bind sockets)
ready {endpoints: {name: url}, ...} ->
                                    <-  start {roster, directive}   once every worker is ready
progress {epoch, epoch_step, ...}   ->                               a few per second at most
checkpoint {handin} + weights       ->                               every [run] checkpoint_every
epoch_end {metrics}                 ->                               epoch roles only
                                    <-  go {directive}  epoch E+1    once every trainer ended E
done {...}                          ->                               epoch roles only
                                    <-  drain {directive}            once every trainer is done,
                                                                     and again if one fails
final {handin, metrics} + weights   ->
                                    <-  stop                         at the end, or on failure
error {message, kind}               ->                               a failure, as data
heartbeat {ack}                     ->                               every [run] heartbeat_s
sync {have}                         ->                               after 3 quiet intervals
                                    <-  state {phase, seq}           the reply to sync
                                    <-  peers {failed}               when workers fail
halted {gen}                        ->   a rewinding run (the pipeline family): a stage it
                                         needs was lost, it stopped where it was
                                    <-  rewind {epoch, gen, roster, handin?} (+ weights)
                                         once every survivor halted and the lost workers are
                                         back: go back to the checkpoint of epoch E

Every worker message carries ``meta["auth"]``: a token made from the run's secret (which the
launcher hands each worker on its standard input, never on a command line) and the worker's
name (:func:`auth_token`). The coordinator drops, and logs, any message without the right
token, and routes its replies only to the connection that last proved it (a worker's socket
identity is ``w<id>.<random>``): knowing a worker's name, or the run id, is worth nothing.

Every coordinator message but ``state`` carries ``meta["seq"]``, numbered per worker from 1;
a worker acknowledges the highest number it received in order in its heartbeats, and the
coordinator resends what stays unacknowledged (:mod:`edgetrain.comm.control`). On resume,
``welcome`` carries the worker's checkpointed hand-in: ``resume: {epoch, handin}`` plus its
arrays.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

REGISTER = "register"
WELCOME = "welcome"
READY = "ready"
START = "start"
PROGRESS = "progress"
CHECKPOINT = "checkpoint"
EPOCH_END = "epoch_end"
GO = "go"
DONE = "done"
DRAIN = "drain"
FINAL = "final"
STOP = "stop"
ERROR = "error"
HEARTBEAT = "heartbeat"
SYNC = "sync"
STATE = "state"
PEERS = "peers"
HALTED = "halted"
REWIND = "rewind"

TO_COORDINATOR = (
    REGISTER,
    READY,
    PROGRESS,
    CHECKPOINT,
    EPOCH_END,
    DONE,
    FINAL,
    ERROR,
    HEARTBEAT,
    SYNC,
    HALTED,
)
TO_WORKER = (WELCOME, START, GO, DRAIN, STOP, PEERS, STATE, REWIND)
NUMBERED = (WELCOME, START, GO, DRAIN, STOP, PEERS, REWIND)

COORDINATOR = "coordinator"
AUTH = "auth"


def worker_name(worker_id: int) -> str:
    """The sender name and socket identity of a worker: ``w<id>``."""
    return f"w{worker_id}"


def worker_id(sender: str) -> int | None:
    """The id in a worker name ``w<id>``, or None for any other name."""
    if sender.startswith("w") and sender[1:].isdigit() and len(sender) < 12:
        return int(sender[1:])
    return None


def heartbeat_identity(worker_id: int) -> str:
    """The socket identity of a worker's heartbeat thread: ``w<id>.hb``."""
    return f"w{worker_id}.hb"


def auth_token(secret: str, run_id: str, worker_id: int) -> str:
    """The token worker ``worker_id`` of run ``run_id`` proves the run's secret with: an HMAC,
    so the secret itself never goes on the wire."""
    text = f"{run_id}:{worker_name(worker_id)}".encode()
    return hmac.new(secret.encode(), text, hashlib.sha256).hexdigest()


def new_secret() -> str:
    """A fresh per-run secret (128 random bits, hex)."""
    return secrets.token_hex(16)


def socket_identity(base: str) -> str:
    """A socket identity nobody can guess: ``base`` (``w3``, ``w3.hb``) and 64 random bits."""
    return f"{base}.{secrets.token_hex(8)}"


def identity_of(identity: bytes, worker_id: int, heartbeat: bool) -> bool:
    """True if ``identity`` is shaped as worker ``worker_id``'s main socket (``w3``,
    ``w3.<random>``) or, with ``heartbeat``, its heartbeat socket (``w3.hb``,
    ``w3.hb.<random>``)."""
    base = (heartbeat_identity(worker_id) if heartbeat else worker_name(worker_id)).encode()
    if identity == base:
        return True
    if not identity.startswith(base + b".") or len(identity) > 64:
        return False
    return heartbeat or not identity.startswith(heartbeat_identity(worker_id).encode())
