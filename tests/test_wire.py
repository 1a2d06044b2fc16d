"""Wire format: round trips, zero-copy frames, multi-frame tensors, and rejection of bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zmq

from edgetrain.comm import channel
from edgetrain.comm.channel import Traffic
from edgetrain.comm.wire import MAX_FRAME_BYTES, Message, WireError, decode, encode

RUN = "run-1"


def _msg(**tensors: np.ndarray) -> Message:
    return Message("gossip", "w0", RUN, step=3, epoch=1, meta={"alpha": 0.25}, tensors=tensors)


def test_round_trip_preserves_everything() -> None:
    rng = np.random.default_rng(0)
    tensors = {
        "a": rng.standard_normal((3, 4)).astype(np.float32),
        "b": np.arange(5, dtype=np.int64),
        "c": np.zeros((0, 7), dtype=np.float64),
        "d": np.array(True),
    }
    out = decode(encode(_msg(**tensors)), RUN, ["gossip"])
    assert (out.type, out.sender, out.run_id, out.step, out.epoch) == ("gossip", "w0", RUN, 3, 1)
    assert out.meta == {"alpha": 0.25}
    assert list(out.tensors) == list(tensors)
    for k, v in tensors.items():
        assert out.tensors[k].dtype == v.dtype and out.tensors[k].shape == v.shape
        np.testing.assert_array_equal(out.tensors[k], v)


def test_tensor_frames_are_views_not_copies() -> None:
    arr = np.arange(1000, dtype=np.float32)
    frames = encode(_msg(x=arr))
    assert isinstance(frames[1], memoryview)
    arr[0] = 42.0
    assert np.frombuffer(frames[1], dtype=np.float32)[0] == 42.0


def test_large_tensor_spans_frames_of_at_most_16_mib() -> None:
    n = (MAX_FRAME_BYTES * 2 + 1000) // 4
    arr = np.arange(n, dtype=np.float32)
    frames = encode(_msg(x=arr))
    assert len(frames) == 1 + 3
    assert all(len(f) <= MAX_FRAME_BYTES for f in frames[1:])
    header = json.loads(frames[0])
    assert header["tensors"][0]["frames"] == 3
    np.testing.assert_array_equal(decode(frames, RUN).tensors["x"], arr)


def test_unjoined_tensors_keep_their_frames_and_copy_into_place() -> None:
    n = (MAX_FRAME_BYTES * 2 + 1000) // 4
    big = np.arange(n, dtype=np.float32).reshape(2, -1)
    small = np.ones(3, dtype=np.float32)
    frames = encode(_msg(x=big, y=small))
    out = decode(frames, RUN, join=False)
    assert list(out.tensors) == ["y"] and list(out.chunked) == ["x"]
    chunked = out.chunked["x"]
    assert (chunked.shape, chunked.dtype, len(chunked.parts)) == (big.shape, big.dtype, 3)
    assert out.tensor_bytes == big.nbytes + small.nbytes == chunked.nbytes + small.nbytes
    into = np.zeros_like(big)
    chunked.copy_to(into)
    np.testing.assert_array_equal(into, big)
    np.testing.assert_array_equal(chunked.join(), big)
    with pytest.raises(WireError, match="frame"):  # unjoined, the frames are checked alike
        decode(frames[:-1], RUN, join=False)


def test_float16_and_non_contiguous_arrays() -> None:
    arr = np.arange(24, dtype=np.float16).reshape(4, 6)[:, ::2]
    out = decode(encode(_msg(x=arr)), RUN)
    np.testing.assert_array_equal(out.tensors["x"], arr)


def _header(frames: list) -> dict:
    return json.loads(bytes(frames[0]))


def _with_header(frames: list, **changes) -> list:
    h = _header(frames)
    h.update(changes)
    return [json.dumps(h).encode(), *frames[1:]]


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda f: [b"\xff\xfe not json", *f[1:]], "bad_json"),
        (lambda f: [b"[1, 2]", *f[1:]], "bad_header"),
        (lambda f: _with_header(f, v=99), "bad_version"),
        (lambda f: _with_header(f, run="other-run"), "wrong_run"),
        (lambda f: _with_header(f, type="evil"), "bad_type"),
        (lambda f: _with_header(f, step=-1), "bad_header"),
        (lambda f: _with_header(f, sender=""), "bad_header"),
        (lambda f: _with_header(f, meta=[1]), "bad_header"),
        (lambda f: f[:1], "frame_mismatch"),
        (lambda f: [*f, b"extra"], "frame_mismatch"),
        (lambda f: [f[0], bytes(f[1])[:-4]], "frame_mismatch"),
        (
            lambda f: _with_header(f, tensors=[{**_header(f)["tensors"][0], "dtype": "object"}]),
            "bad_dtype",
        ),
        (
            lambda f: _with_header(f, tensors=[{**_header(f)["tensors"][0], "shape": [3, 3]}]),
            "size_mismatch",
        ),
        (
            lambda f: _with_header(f, tensors=[{**_header(f)["tensors"][0], "frames": 2}]),
            "frame_mismatch",
        ),
        (lambda f: _with_header(f, tensors=[_header(f)["tensors"][0]] * 2), "bad_tensor"),
        (lambda f: [], "empty"),
    ],
)
def test_malformed_messages_are_rejected_with_a_reason(mutate, reason) -> None:
    frames = encode(_msg(x=np.ones(4, dtype=np.float32)))
    with pytest.raises(WireError) as exc:
        decode(mutate(frames), RUN, ["gossip"])
    assert exc.value.reason == reason


def test_size_limit() -> None:
    frames = encode(_msg(x=np.ones(1000, dtype=np.float32)))
    with pytest.raises(WireError, match="too_large"):
        decode(frames, RUN, max_bytes=100)


def test_pickle_payload_is_never_unpickled(tmp_path) -> None:
    import pickle

    class Boom:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    payload = pickle.dumps(Boom())
    for frames in ([payload], [encode(_msg())[0], payload]):
        with pytest.raises(WireError):
            decode(frames, RUN)
    assert not (tmp_path / "pwned").exists()


def test_sockets_count_traffic_and_drop_bad_messages() -> None:
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    push = ctx.socket(zmq.PUSH)
    try:
        endpoint = channel.bind_random(pull)
        push.connect(endpoint)
        sent, recv_t = Traffic(), Traffic()
        arr = np.arange(100_000, dtype=np.float32)  # above the zero-copy threshold
        n = channel.send(push, _msg(x=arr), sent)
        push.send_multipart([b"garbage"])
        got = channel.recv(pull, RUN, ["gossip"], recv_t)
        assert got is not None
        np.testing.assert_array_equal(got[1].tensors["x"], arr)
        assert channel.recv(pull, RUN, ["gossip"], recv_t) is None
        assert sent.bytes_sent == n and sent.messages_sent == 1
        assert recv_t.messages_received == 1 and recv_t.dropped["bad_json"] == 1
        assert recv_t.bytes_received == n + len(b"garbage")
    finally:
        push.close(0)
        pull.close(0)
        ctx.term()
