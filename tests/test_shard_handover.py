"""A parameter-server shard's ROUTER hands a trainer's name over to its newest connection: a
restarted trainer connects again under its name while the shard may still hold the old
connection (a host that rebooted sends no FIN), and without the hand-over the shard would drop
everything the new process sends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import zmq

from edgetrain.comm.channel import Traffic
from edgetrain.comm.control import Role
from edgetrain.ps.server import ShardServer
from edgetrain.recipe import parse_recipe
from edgetrain.runtime.base import WorkerContext

NAME = b"trainer-2"


@pytest.fixture
def shard() -> Iterator[ShardServer]:
    recipe = parse_recipe({
        "run": {"seed": 1},
        "data": {"dataset": "digits"},
        "model": {"name": "mlp"},
        "train": {"family": "ps", "technique": "sequential", "epochs": 1},
        "workers": [{"count": 1, "role": "server"}, {"count": 2}],
    })  # fmt: skip
    ctx = WorkerContext(recipe, "run1", 0, Role("server", 0), "hostx", zmq.Context.instance(),
                        Traffic())  # fmt: skip
    s = ShardServer(ctx)
    try:
        yield s
    finally:
        s.close()


def _dealer(endpoint: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, NAME)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def _recv(sock: zmq.Socket, timeout_ms: int = 10_000) -> list[bytes] | None:
    return sock.recv_multipart() if sock.poll(timeout_ms) else None


@pytest.mark.timeout(60)
def test_a_trainers_new_connection_takes_its_name_over(shard: ShardServer) -> None:
    shard.setup()
    router = shard.router
    endpoint = router.getsockopt(zmq.LAST_ENDPOINT).decode()
    old = _dealer(endpoint)
    new = None
    try:
        old.send(b"from the first process")
        assert _recv(router) == [NAME, b"from the first process"]
        new = _dealer(endpoint)  # the old connection is still up: no FIN, as after a reboot
        new.send(b"from the restarted one")
        assert _recv(router) == [NAME, b"from the restarted one"]  # not refused
        router.send_multipart([NAME, b"reply"])
        assert _recv(new) == [b"reply"]  # replies go to the new process
        assert _recv(old, 200) is None
    finally:
        old.close()
        if new is not None:
            new.close()
