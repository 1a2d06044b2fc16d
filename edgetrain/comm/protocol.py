"""Message types between workers and the coordinator, and the order they come in.

worker                         coordinator
register {worker, host, pid, endpoint}  ->
                             <- welcome {recipe, num_workers}
(load data, build model)
ready                        ->
                             <- start {peers}              once every worker is ready
progress {epoch, step, loss} ->                             at most a few per second
epoch_end {metrics}          ->
                             <- go {epoch}                  once all alive workers ended it
done {sent: {peer: count}}   ->
                             <- drain {expect}              once every worker is done
final {alpha, metrics} + weights ->
                             <- stop                        at the end, or on any failure
error {message}              ->                             a worker's failure, as data
heartbeat                    ->                             every [run] heartbeat_s, own socket
                             <- peers {failed}              when workers fail and the run goes on

epoch_end carries the worker's weights (and optimiser state) when the coordinator asked for a
checkpoint of that epoch (``start``'s ``checkpoint_every``); on resume, ``welcome`` carries the
worker's checkpointed weights and ``resume: {epoch, alpha}``.
"""

from __future__ import annotations

REGISTER = "register"
WELCOME = "welcome"
READY = "ready"
START = "start"
PROGRESS = "progress"
EPOCH_END = "epoch_end"
GO = "go"
DONE = "done"
DRAIN = "drain"
FINAL = "final"
STOP = "stop"
ERROR = "error"
GOSSIP = "gossip"
HEARTBEAT = "heartbeat"
PEERS = "peers"

TO_COORDINATOR = (REGISTER, READY, PROGRESS, EPOCH_END, DONE, FINAL, ERROR, HEARTBEAT)
TO_WORKER = (WELCOME, START, GO, DRAIN, STOP, PEERS)
BETWEEN_PEERS = (GOSSIP,)

COORDINATOR = "coordinator"


def worker_name(worker_id: int) -> str:
    """The sender name and socket identity of a worker: ``w<id>``."""
    return f"w{worker_id}"


def heartbeat_identity(worker_id: int) -> str:
    """The socket identity of a worker's heartbeat thread: ``w<id>.hb``."""
    return f"w{worker_id}.hb"
