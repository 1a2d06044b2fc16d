"""Wire format: a JSON header frame plus raw tensor frames of at most 16 MiB, validated on receipt.

Frame 0 is a UTF-8 JSON object::

    {"v": 1, "type": "gossip", "sender": "w2", "run": "<run id>", "step": 120, "epoch": 3,
     "meta": {...small JSON...},
     "tensors": [{"name": "fc.weight", "dtype": "float32", "shape": [10, 64],
                  "nbytes": 2560, "frames": 1}, ...]}

Each tensor's bytes follow in ``frames`` consecutive frames; every frame but a tensor's last
holds exactly :data:`MAX_FRAME_BYTES`. Nothing is ever unpickled: a receiver checks the version,
run id, type, sender, dtype allow-list, shapes, byte counts and frame lengths, and raises
:class:`WireError` with a short machine-readable ``reason`` for anything else.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 16 * 2**20
MAX_HEADER_BYTES = 256 * 2**10
MAX_TENSORS = 4096
MAX_DIMS = 8
MAX_NAME_CHARS = 256
DEFAULT_MAX_MESSAGE_BYTES = 2 * 2**30
# The smallest message bound a run gets: control messages (a recipe in ``welcome``, reports)
# and a small model's tensors always fit.
MIN_MESSAGE_BYTES = 4 * 2**20

DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(name)
    for name in (
        "float32",
        "float64",
        "float16",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "bool",
    )
}


class WireError(Exception):
    """A malformed or unexpected message; ``reason`` is a short counter key."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


@dataclass(frozen=True)
class Limits:
    """What one message may hold: ``message_bytes`` of tensors in at most ``tensors`` tensors.

    A run's limits come from its model (:func:`edgetrain.runtime.limits.run_limits`): the
    largest message it can legitimately send. Every socket that receives from the network
    refuses, in ZeroMQ itself (``MAXMSGSIZE``), any frame larger than :attr:`frame_bytes`: the
    peer is disconnected before the frame is buffered. ZeroMQ has no bound on the number of
    frames of one message (it queues a message once all its frames are in), so :func:`decode`
    drops a message of more than :attr:`frames` frames before it reads anything else.
    """

    message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    tensors: int = MAX_TENSORS

    @property
    def frame_bytes(self) -> int:
        """The largest frame: a header, or a tensor's chunk of at most the message's bytes."""
        return max(MAX_HEADER_BYTES, min(MAX_FRAME_BYTES, self.message_bytes))

    @property
    def frames(self) -> int:
        """The most frames a message within these limits can have (header included)."""
        return 1 + self.tensors + math.ceil(self.message_bytes / MAX_FRAME_BYTES)

    def args(self) -> tuple[str, ...]:
        """The ``edgetrain worker`` options that hand these limits to a worker."""
        return ("--max-message-bytes", str(self.message_bytes), "--max-tensors", str(self.tensors))


DEFAULT_LIMITS = Limits()


def limits_for(
    state_bytes: int, state_tensors: int, activation_bytes: int, data_bytes: int = 0
) -> Limits:
    """Generous limits for a run whose model holds ``state_bytes`` in ``state_tensors`` tensors
    and whose batch's largest activation is ``activation_bytes``: four times each (a model with
    its optimiser's state, an activation with its error), plus ``data_bytes`` where a family
    hands its training data in, above :data:`MIN_MESSAGE_BYTES`."""
    message = MIN_MESSAGE_BYTES + 4 * state_bytes + 4 * activation_bytes + data_bytes
    return Limits(message, min(MAX_TENSORS, 4 * state_tensors + 64))


@dataclass(frozen=True)
class Chunked:
    """A received tensor that spans several frames, not joined (``decode(join=False)``): its
    dtype, shape and the frames' bytes in order, each a read-only view of a received frame."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    parts: tuple[memoryview, ...]

    @property
    def nbytes(self) -> int:
        return sum(len(p) for p in self.parts)

    def copy_to(self, out: np.ndarray) -> None:
        """Copy the bytes into ``out`` (C-contiguous, of this dtype and shape), frame by frame."""
        flat = out.reshape(-1).view(np.uint8)
        off = 0
        for part in self.parts:
            flat[off : off + len(part)] = np.frombuffer(part, dtype=np.uint8)
            off += len(part)

    def add_to(self, out: np.ndarray) -> None:
        """Add the values into ``out`` (C-contiguous, of this dtype and shape) in place."""
        flat = out.reshape(-1)
        off = 0
        for part in self.parts:
            vals = np.frombuffer(part, dtype=self.dtype)
            flat[off : off + len(vals)] += vals
            off += len(vals)

    def all_finite(self) -> bool:
        return all(bool(np.isfinite(np.frombuffer(p, dtype=self.dtype)).all()) for p in self.parts)

    def join(self) -> np.ndarray:
        out = np.empty(self.shape, dtype=self.dtype)
        self.copy_to(out)
        return out


@dataclass
class Message:
    """One decoded (or to-be-encoded) message. ``chunked``: the tensors a receiver asked to
    get unjoined (``decode(join=False)``); ``tensors`` then holds the others."""

    type: str
    sender: str
    run_id: str
    step: int = 0
    epoch: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    chunked: dict[str, Chunked] = field(default_factory=dict)

    @property
    def tensor_bytes(self) -> int:
        return sum(int(a.nbytes) for a in self.received().values())

    def received(self) -> dict[str, np.ndarray | Chunked]:
        """Every tensor by name, joined or not (decode never gives a name to both)."""
        return {**self.tensors, **self.chunked}


def _chunks(nbytes: int) -> int:
    return max(1, math.ceil(nbytes / MAX_FRAME_BYTES))


def _contiguous(arr: Any) -> np.ndarray:
    """A C-contiguous array; unlike ``np.ascontiguousarray`` it keeps 0-d arrays 0-d."""
    a = np.asarray(arr)
    return a if a.flags.c_contiguous else a.copy(order="C")


def encode(msg: Message) -> list[bytes | memoryview]:
    """Encode to frames. Tensor frames are memoryviews of the arrays: no copy is made."""
    specs: list[dict[str, Any]] = []
    frames: list[bytes | memoryview] = []
    for name, arr in msg.tensors.items():
        a = _contiguous(arr)
        dname = a.dtype.name
        if dname not in DTYPES:
            raise WireError("bad_dtype", f"cannot send dtype {dname} for tensor {name!r}")
        view = a.reshape(-1).view(np.uint8).data if a.size else memoryview(b"")
        n = _chunks(a.nbytes)
        specs.append(
            {
                "name": name,
                "dtype": dname,
                "shape": list(a.shape),
                "nbytes": int(a.nbytes),
                "frames": n,
            }
        )
        for i in range(n):
            frames.append(view[i * MAX_FRAME_BYTES : (i + 1) * MAX_FRAME_BYTES])
    header = {
        "v": PROTOCOL_VERSION,
        "type": msg.type,
        "sender": msg.sender,
        "run": msg.run_id,
        "step": int(msg.step),
        "epoch": int(msg.epoch),
        "meta": msg.meta,
        "tensors": specs,
    }
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(head) > MAX_HEADER_BYTES:
        raise WireError("header_too_large", f"{len(head)} bytes")
    return [head, *frames]


def _buf(frame: Any) -> memoryview:
    """A memoryview of a received frame (zmq.Frame, bytes or memoryview)."""
    b = getattr(frame, "buffer", None)
    return memoryview(b if b is not None else frame)


def _nonneg_int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise WireError("bad_header", f"{what} must be a non-negative integer")
    return value


def decode_header(frame: Any) -> dict[str, Any]:
    """Parse and check the header frame's structure (not yet its run id or type)."""
    raw = _buf(frame)
    if len(raw) > MAX_HEADER_BYTES:
        raise WireError("header_too_large", f"{len(raw)} bytes")
    try:
        header = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise WireError("bad_json", str(exc)[:80]) from None
    if not isinstance(header, dict):
        raise WireError("bad_header", "header is not a JSON object")
    if header.get("v") != PROTOCOL_VERSION:
        raise WireError("bad_version", f"protocol version {header.get('v')!r}")
    for key in ("type", "sender", "run"):
        val = header.get(key)
        if not isinstance(val, str) or not val or len(val) > MAX_NAME_CHARS:
            raise WireError("bad_header", f"{key} must be a short string")
    _nonneg_int(header.get("step"), "step")
    _nonneg_int(header.get("epoch"), "epoch")
    if not isinstance(header.get("meta"), dict):
        raise WireError("bad_header", "meta must be an object")
    if not isinstance(header.get("tensors"), list) or len(header["tensors"]) > MAX_TENSORS:
        raise WireError("bad_header", "tensors must be a list of at most 4096 entries")
    return header


def claimed_sender(frame: Any) -> str | None:
    """The sender a header frame names, if it parses at all (untrusted: for counters only)."""
    try:
        sender = decode_header(frame).get("sender")
    except WireError:
        return None
    return sender if isinstance(sender, str) else None


def decode(
    frames: Sequence[Any],
    run_id: str | None,
    allowed_types: Iterable[str] | None = None,
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    limits: Limits = DEFAULT_LIMITS,
    join: bool = True,
) -> Message:
    """Validate and decode frames into a :class:`Message` within ``limits`` (and ``max_bytes``).

    Single-frame tensors are zero-copy, read-only views of the received frame; tensors that
    span several frames are joined into one new array, or with ``join=False`` left as their
    frames (:class:`Chunked`, in ``chunked``) for a receiver that copies them somewhere anyway.
    """
    if not frames:
        raise WireError("empty", "no frames")
    if len(frames) > limits.frames:
        raise WireError("too_many_frames", f"{len(frames)} frames, at most {limits.frames}")
    max_bytes = min(max_bytes, limits.message_bytes)
    header = decode_header(frames[0])
    if len(header["tensors"]) > limits.tensors:
        raise WireError("too_many_tensors", f"at most {limits.tensors} tensors")
    if run_id is not None and header["run"] != run_id:
        raise WireError("wrong_run", f"run id {header['run'][:40]!r}")
    if allowed_types is not None and header["type"] not in set(allowed_types):
        raise WireError("bad_type", f"type {header['type'][:40]!r}")
    body = frames[1:]
    pos = 0
    total = 0
    tensors: dict[str, np.ndarray] = {}
    chunked: dict[str, Chunked] = {}
    for spec in header["tensors"]:
        if not isinstance(spec, dict):
            raise WireError("bad_tensor", "tensor entry is not an object")
        name = spec.get("name")
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
            raise WireError("bad_tensor", "tensor name must be a short string")
        if name in tensors or name in chunked:
            raise WireError("bad_tensor", f"duplicate tensor {name!r}")
        dname = spec.get("dtype")
        dtype = DTYPES.get(dname) if isinstance(dname, str) else None
        if dtype is None:
            raise WireError("bad_dtype", f"dtype {str(spec.get('dtype'))[:20]!r} not allowed")
        shape = spec.get("shape")
        if not isinstance(shape, list) or len(shape) > MAX_DIMS:
            raise WireError("bad_tensor", f"shape of {name!r} must be a list of <= 8 dims")
        dims = [_nonneg_int(d, "shape entry") for d in shape]
        nbytes = _nonneg_int(spec.get("nbytes"), "nbytes")
        if math.prod(dims) * dtype.itemsize != nbytes:
            raise WireError("size_mismatch", f"{name!r}: shape x itemsize != nbytes")
        total += nbytes
        if total > max_bytes:
            raise WireError("too_large", f"message exceeds {max_bytes} bytes")
        nframes = _nonneg_int(spec.get("frames"), "frames")
        if nframes != _chunks(nbytes):
            raise WireError("frame_mismatch", f"{name!r}: {nframes} frames for {nbytes} bytes")
        if pos + nframes > len(body):
            raise WireError("frame_mismatch", "fewer frames than the header announces")
        parts = [_buf(f) for f in body[pos : pos + nframes]]
        pos += nframes
        for i, part in enumerate(parts):
            want = min(MAX_FRAME_BYTES, nbytes - i * MAX_FRAME_BYTES)
            if len(part) != max(want, 0):
                raise WireError("frame_mismatch", f"{name!r}: frame {i} has {len(part)} bytes")
        if nframes == 1:
            tensors[name] = np.frombuffer(parts[0], dtype=dtype).reshape(tuple(dims))
            continue
        unjoined = Chunked(dtype, tuple(dims), tuple(memoryview(p) for p in parts))
        if join:
            tensors[name] = unjoined.join()
        else:
            chunked[name] = unjoined
    if pos != len(body):
        raise WireError("frame_mismatch", "more frames than the header announces")
    return Message(
        type=header["type"],
        sender=header["sender"],
        run_id=header["run"],
        step=header["step"],
        epoch=header["epoch"],
        meta=header["meta"],
        tensors=tensors,
        chunked=chunked,
    )


def arrays_from_state(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Snapshot a mapping of torch tensors (or arrays) as owned, contiguous CPU numpy arrays.

    A copy is needed: frames are sent zero-copy, so ZeroMQ may still be reading them after
    ``send`` returns, while training goes on updating the live tensors in place.
    """
    out: dict[str, np.ndarray] = {}
    for name, value in state.items():
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        out[name] = np.array(value, order="C", copy=True)
    return out


# ------------------------------------------------------------------ what families check on receipt


def is_count(value: Any) -> bool:
    """A non-negative int, not a bool: an iteration, epoch, step or round in a message's meta."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def float32_problem(
    arr: np.ndarray | Chunked, shape: Sequence[int], finite: bool = True
) -> str | None:
    """Why a received array (or unjoined tensor) is not a float32 tensor of ``shape`` (with
    ``finite``: of finite values), as a drop reason, or None."""
    if arr.dtype != np.float32:
        return "bad_tensor_dtype"
    if tuple(arr.shape) != tuple(shape):
        return "bad_tensor_shape"
    if finite:
        ok = arr.all_finite() if isinstance(arr, Chunked) else bool(np.isfinite(arr).all())
        if not ok:
            return "non_finite"
    return None
