"""A shard's zero-copy pull replies: the tensors a reply on its way holds move to fresh storage
before an update, so the reply carries the values it was answered with; once ZeroMQ has let go
of the reply, updates are in place again. Real ZeroMQ trackers over an inproc pair."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
import zmq

from edgetrain.comm import channel
from edgetrain.comm.channel import Traffic
from edgetrain.comm.wire import Message
from edgetrain.ps import messages
from edgetrain.ps.loans import Loans

N = 1 << 16  # 256 KiB of float32: above pyzmq's copy threshold, so really zero-copy


@pytest.fixture()
def pair() -> Iterator[tuple[zmq.SyncSocket, zmq.SyncSocket]]:
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://loans")
    b.connect("inproc://loans")
    yield a, b
    a.close(0)
    b.close(0)
    ctx.term()


def _lend_and_send(
    sock: zmq.SyncSocket, w: torch.Tensor, loans: Loans, traffic: Traffic | None = None
) -> tuple[int, list[zmq.MessageTracker]]:
    """What a shard does with a pull's reply: lend ``w`` and send it zero-copy, tracked."""
    loan = loans.lend(["w"])
    msg = Message(messages.PARAMS, "w0", "run", tensors={"w": w.detach().numpy()})
    nbytes, trackers = channel.send_tracked(sock, msg, traffic)
    loans.sent(loan, trackers)
    return nbytes, trackers


def test_an_update_overtaking_a_reply_copies_and_the_reply_keeps_its_values(
    pair: tuple[zmq.SyncSocket, zmq.SyncSocket],
) -> None:
    a, b = pair
    w, loans, traffic = torch.zeros(N), Loans(), Traffic()
    nbytes, trackers = _lend_and_send(a, w, loans, traffic)
    assert nbytes > 4 * N and traffic.messages_sent == 1 and len(loans) == 1
    before = w.data_ptr()
    loans.before_update("w", w)  # the reply is still queued: the update must not touch it
    assert w.data_ptr() != before and loans.copies == 1
    w.add_(1.0)
    got = channel.recv(b, "run", [messages.PARAMS])
    assert got is not None
    assert np.array_equal(got[1].tensors["w"], np.zeros(N, dtype=np.float32))
    loans.before_update("w", w)  # no reply holds the new storage: in place again
    assert loans.copies == 1


def test_once_zeromq_lets_go_updates_are_in_place(
    pair: tuple[zmq.SyncSocket, zmq.SyncSocket],
) -> None:
    a, b = pair
    w, loans = torch.zeros(N), Loans()
    _, trackers = _lend_and_send(a, w, loans)
    frames = b.recv_multipart(copy=False)
    del frames  # the receiver frees the message: ZeroMQ lets go of the sender's buffer
    for t in trackers:
        t.wait(5)
    before = w.data_ptr()
    loans.before_update("w", w)
    assert w.data_ptr() == before and loans.copies == 0 and len(loans) == 0


def test_a_reply_not_yet_sent_holds_its_tensors_and_other_tensors_are_free() -> None:
    loans = Loans()
    loans.lend(["a"])  # waiting in the emulated link's delay line
    a, other = torch.zeros(4), torch.zeros(4)
    pa, po = a.data_ptr(), other.data_ptr()
    loans.before_update("other", other)
    loans.before_update("a", a)
    assert other.data_ptr() == po and a.data_ptr() != pa and loans.copies == 1


def test_a_pull_answer_is_copied_in_whole_or_not_at_all() -> None:
    from edgetrain.comm.wire import MAX_FRAME_BYTES, decode, encode

    params = {"a": torch.zeros(3), "big": torch.zeros(MAX_FRAME_BYTES // 4 + 10)}
    answer = {
        "a": np.ones(3, np.float32),
        "big": np.full(MAX_FRAME_BYTES // 4 + 10, 2.0, np.float32),
    }
    got = decode(encode(Message(messages.PARAMS, "w0", "run", tensors=answer)), "run", join=False)
    assert list(got.chunked) == ["big"]  # two frames, left unjoined
    names = ["a", "big"]
    assert messages.copy_in(params, got.tensors, names, got.chunked) is None
    assert params["a"].tolist() == [1.0] * 3 and bool((params["big"] == 2.0).all())
    bad = {"a": np.ones(4, np.float32)}  # a wrong shape: nothing is copied, the reason named
    fresh = {"a": torch.zeros(3), "big": torch.zeros(MAX_FRAME_BYTES // 4 + 10)}
    assert "wrong shape" in str(messages.copy_in(fresh, bad, names, got.chunked))
    assert float(fresh["big"].abs().sum()) == 0.0
    assert "other tensors" in str(messages.copy_in(fresh, got.tensors, names))


def test_an_unjoined_gradient_is_checked_like_a_joined_one() -> None:
    from edgetrain.comm.wire import MAX_FRAME_BYTES, decode, encode

    n = MAX_FRAME_BYTES // 4 + 5
    shapes = {"g": (n,)}
    for value, reason in ((1.0, None), (float("nan"), "non_finite"), (float("inf"), "non_finite")):
        g = np.ones(n, np.float32)
        g[-1] = value  # in the second frame
        msg = decode(
            encode(Message(messages.PUSH, "w1", "run", tensors={"g": g})), "run", join=False
        )
        assert messages.gradients(msg.tensors, ["g"], shapes, msg.chunked) == reason
    assert messages.gradients({}, ["g"], {"g": (n + 1,)}, msg.chunked) == "bad_tensor_shape"
    assert messages.gradients({}, ["g", "h"], shapes, msg.chunked) == "bad_tensor_names"
