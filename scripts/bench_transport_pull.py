"""The parameter-server paths of ``scripts/bench_transport``: one trainer pulls a whole model
from one shard, and pushes a whole model's gradients to it, three ways, between two processes.

- ``edgetrain``: the code a run executes: the trainer's ``ps.pull`` request through a
  :class:`~edgetrain.comm.transport.Transport` DEALER, the shard's checks
  (:func:`~edgetrain.ps.messages.request_fields`), its zero-copy ``ps.params`` reply to the
  ROUTER identity with the tensors lent until ZeroMQ is done (:mod:`edgetrain.ps.loans`),
  and the trainer's validated receipt and copy into its parameters
  (:func:`~edgetrain.ps.messages.copy_in`).
- ``gloo``: what a user's parameter server over ``torch.distributed`` would do: a one-element
  request, then ``dist.send`` of every tensor straight from the shard's storage and
  ``dist.recv`` straight into the trainer's parameters (no copy at either end).
- ``raw``: the ideal over a TCP socket: a one-byte request, ``sendall`` of every tensor's
  bytes, ``recv_into`` every parameter's storage.

A push is the same the other way: ``edgetrain`` is the trainer's ``ps.push`` of every
gradient (zero-copy views, as the transmitter sends them) and the shard's checks of the request
and of the gradients (float32, shapes, finite: :func:`~edgetrain.ps.messages.gradients`) and
its ``ps.ack``; ``gloo`` and ``raw`` send every gradient into buffers the shard preallocated,
then a one-element (one-byte) ack. The shard's aggregation and update are not timed: every way
would do them alike.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import zmq

from edgetrain.comm.channel import Traffic
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Limits
from edgetrain.models.zoo import build_model
from edgetrain.ps import messages
from edgetrain.ps.loans import Loans
from edgetrain.runtime.limits import limits_for

RUN = "bench"
LAYOUT = "bench-layout"
INPUT = (3, 32, 32)


@dataclass
class Model:
    """A zoo model's parameters (float32, in order), as one side of the pull holds them."""

    name: str
    params: dict[str, torch.Tensor]

    @classmethod
    def build(cls, name: str, seed: int) -> Model:
        torch.manual_seed(seed)
        net = build_model(name, INPUT, 10)
        return cls(name, {n: p.detach().clone() for n, p in net.named_parameters()})

    @property
    def names(self) -> list[str]:
        return list(self.params)

    @property
    def nbytes(self) -> int:
        return sum(int(p.numel() * p.element_size()) for p in self.params.values())

    def limits(self) -> Limits:
        return limits_for(self.nbytes, len(self.params), 0)

    def views(self) -> list[memoryview]:
        return [memoryview(p.numpy()).cast("B") for p in self.params.values()]


def transport(ctx: zmq.SyncContext, model: Model, worker: int) -> Transport:
    return Transport(ctx, RUN, worker, Traffic(), limits=model.limits())


# ---------------------------------------------------------------- the shard's side


def shard_edgetrain(tr: Transport, router: zmq.SyncSocket, model: Model, loans: Loans) -> None:
    """Answer one pull as a shard does: zero-copy, the tensors lent until ZeroMQ is done."""
    got = tr.recv(router, messages.TO_SERVER, router=True)
    assert got is not None, "the pull did not decode"
    identity, msg = got
    problem = messages.request_fields(msg.meta, set(model.params), LAYOUT)
    assert problem is None, problem
    names = list(msg.meta["names"])
    for name in names:  # the update a shard makes between pulls (here: none, values kept)
        loans.before_update(name, model.params[name])
    weights = {n: model.params[n].detach().numpy() for n in names}
    loan = loans.lend(names)
    meta = {k: msg.meta[k] for k in ("iter", "seg", "req")} | {"held_s": 0.0, "version": 0}
    reply = tr.message(messages.PARAMS, meta, weights)
    _, trackers = tr.send_tracked(router, reply, identity=identity or b"", flags=zmq.NOBLOCK)
    loans.sent(loan, trackers)


def shard_push_edgetrain(tr: Transport, router: zmq.SyncSocket, model: Model) -> None:
    """Take one push as a shard does (up to its aggregation), and acknowledge it."""
    got = tr.recv(router, messages.TO_SERVER, router=True, join=False)  # as a shard does
    assert got is not None, "the push did not decode"
    identity, msg = got
    problem = messages.request_fields(msg.meta, set(model.params), LAYOUT)
    shapes = {n: tuple(p.shape) for n, p in model.params.items()}
    problem = problem or messages.gradients(msg.tensors, msg.meta["names"], shapes, msg.chunked)
    assert problem is None, problem
    ack = {k: msg.meta[k] for k in ("iter", "seg", "req")}
    tr.send(router, tr.message(messages.ACK, ack), identity=identity or b"")


def shard_push_gloo(model: Model, into: dict[str, torch.Tensor]) -> None:
    import torch.distributed as dist

    for name in model.params:
        dist.recv(into[name], src=1)
    dist.send(torch.ones(1), dst=1)


def shard_push_raw(conn: socket.socket, into: dict[str, torch.Tensor]) -> None:
    for t in into.values():
        _recv_exact(conn, memoryview(t.numpy()).cast("B"))
    conn.sendall(b"k")


def shard_gloo(model: Model) -> None:
    import torch.distributed as dist

    req = torch.zeros(1)
    dist.recv(req, src=1)
    for p in model.params.values():
        dist.send(p, dst=1)


def shard_raw(conn: socket.socket, model: Model) -> None:
    for view in model.views():
        conn.sendall(view)


# ---------------------------------------------------------------- the trainer's side


def pull_fns(
    model: Model,
    tr: Transport,
    dealer: zmq.SyncSocket,
    conn: socket.socket,
    gloo: bool,
) -> dict[str, Callable[[], None]]:
    """One pull of ``model`` per call, for each way, in the order of the shard's rounds."""
    count = iter(range(1, 2**31))

    def edgetrain() -> None:
        i = next(count)
        meta: dict[str, Any] = {
            "iter": i, "seg": 0, "req": i, "names": model.names, "layout": LAYOUT,
        }  # fmt: skip
        tr.send(dealer, tr.message(messages.PULL, meta), peer="ps0")
        assert dealer.poll(600_000), "the shard did not answer the pull"
        got = tr.recv(dealer, messages.TO_TRAINER, join=False)
        assert got is not None and got[1].type == messages.PARAMS
        problem = messages.copy_in(model.params, got[1].tensors, model.names, got[1].chunked)
        assert problem is None, problem

    def raw() -> None:
        conn.sendall(b"p")
        for view in model.views():
            _recv_exact(conn, view)

    fns = {"raw": raw, "edgetrain": edgetrain}  # (no bare ZeroMQ way: a pull is the PS's code)
    if gloo:
        import torch.distributed as dist

        req = torch.ones(1)

        def gloo_pull() -> None:
            dist.send(req, dst=0)
            for p in model.params.values():
                dist.recv(p, src=0)

        fns["gloo"] = gloo_pull
    return fns


def push_fns(
    model: Model, tr: Transport, dealer: zmq.SyncSocket, conn: socket.socket, gloo: bool
) -> dict[str, Callable[[], None]]:
    """One push of ``model``'s gradients (its parameters' values stand in) per call."""
    count = iter(range(1, 2**31))
    grads = {n: p.detach().numpy() for n, p in model.params.items()}  # as the transmitter's

    def edgetrain() -> None:
        i = next(count)
        meta: dict[str, Any] = {
            "iter": i, "seg": 0, "req": i, "names": model.names, "layout": LAYOUT,
        }  # fmt: skip
        tr.send(dealer, tr.message(messages.PUSH, meta, grads), peer="ps0")
        assert dealer.poll(600_000), "the shard did not acknowledge the push"
        got = tr.recv(dealer, messages.TO_TRAINER)
        assert got is not None and got[1].type == messages.ACK

    def raw() -> None:
        for view in model.views():
            conn.sendall(view)
        assert conn.recv(1) == b"k"

    fns = {"raw": raw, "edgetrain": edgetrain}
    if gloo:
        import torch.distributed as dist

        ack = torch.zeros(1)

        def gloo_push() -> None:
            for p in model.params.values():
                dist.send(p, dst=0)
            dist.recv(ack, src=0)

        fns["gloo"] = gloo_push
    return fns


def _recv_exact(conn: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("the other side closed the connection")
        got += n


def same_weights(a: Model, b: Model) -> bool:
    """Whether a pull left the trainer with the shard's exact weights."""
    return all(np.array_equal(a.params[n].numpy(), b.params[n].numpy()) for n in a.params)
