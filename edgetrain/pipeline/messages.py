"""Messages between pipeline processes, and their checks (specification §10).

- ``pipe.act``, stage s -> s+1: meta ``epoch``, ``mb``, ``gen``, ``version`` (diagnostic);
  tensors ``act`` (float32, b x the activation) and ``labels`` (int64, b), carried to the last
  stage;
- ``pipe.grad``, stage s+1 -> s: meta ``epoch``, ``mb``, ``gen``; tensor ``grad`` (float32,
  the activation's shape);
- ``pipe.snap``, stage (or replica 0) -> evaluator: meta ``snap``, ``epoch``, ``mb``,
  ``train_s``, ``part``, ``parts``, ``unit``; one unit's weights and buffers;
- ``dp.grad``, replica -> every other replica: meta ``epoch``, ``step``, ``gen``; its
  gradients.

A receiver drops (and counts by reason) what is malformed or comes from anyone but the peer it
expects: a stranger's or a fuzzer's frames never reach training. A well-formed message from the
right peer for another microbatch than the next operation needs is a broken run, never
reordered: the stage stops with one line naming both (:class:`OutOfOrder`). ``gen`` is the
generation of a run that rewinds (:mod:`edgetrain.comm.rewind`): a message from before the
receiver's last rewind is stale and dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from edgetrain.comm.rewind import gen_of
from edgetrain.comm.wire import Message, float32_problem, is_count
from edgetrain.errors import RunError

ACT = "pipe.act"
GRAD = "pipe.grad"
SNAP = "pipe.snap"
DP_GRAD = "dp.grad"


class OutOfOrder(RunError):
    """The right peer sent a message for another operation than the one this stage runs."""


@dataclass(frozen=True)
class Expect:
    """What the next message on a link must be."""

    kind: str  # ACT or GRAD
    sender: str
    epoch: int
    mb: int
    shape: tuple[int, ...]
    classes: int = 0  # labels in [0, classes) on activations
    gen: int = 0  # the receiver's generation (a run that rewinds)

    def what(self) -> str:
        noun = "activation" if self.kind == ACT else "error"
        return f"the {noun} of microbatch {self.mb} (epoch {self.epoch}) from {self.sender}"


def problem(msg: Message, expect: Expect) -> str | None:
    """Why ``msg`` cannot be used and is dropped (a counter reason), or None. Order is not
    checked here: see :func:`check_order`."""
    if msg.sender != expect.sender:
        return "unknown_sender"
    if not is_count(msg.meta.get("epoch")) or not is_count(msg.meta.get("mb")):
        return "bad_meta"
    if gen_of(msg.meta) != expect.gen:  # sent before a rewind (never after: see comm.rewind)
        return "stale"
    names = {"act", "labels"} if expect.kind == ACT else {"grad"}
    if set(msg.tensors) != names:
        return "bad_tensor_names"
    main = msg.tensors["act" if expect.kind == ACT else "grad"]
    reason = float32_problem(main, expect.shape, finite=False)
    if reason is not None:
        return reason
    if expect.kind == ACT:
        labels = msg.tensors["labels"]
        if labels.dtype != np.int64 or labels.shape != (expect.shape[0],):
            return "bad_labels"
        if labels.size and (int(labels.min()) < 0 or int(labels.max()) >= expect.classes):
            return "bad_labels"
    return None


def check_order(msg: Message, expect: Expect, stage: str) -> None:
    """Raise :class:`OutOfOrder` unless ``msg`` is for exactly the expected operation."""
    got = (msg.meta.get("epoch"), msg.meta.get("mb"))
    if got != (expect.epoch, expect.mb):
        raise OutOfOrder(
            f"{stage} waited for {expect.what()} but got microbatch {got[1]} (epoch {got[0]}); "
            "the pipeline's fixed order is broken, so the run stops rather than reorder"
        )


def snapshot_problem(
    msg: Message,
    senders: Mapping[str, int],
    names: Mapping[int, Sequence[str]],
    shapes: Mapping[str, tuple[int, ...]],
) -> str | None:
    """Why a snapshot part is unusable: a sender that is not a stage, a part of another stage's
    units, names or shapes that are not the model's, anything but float32."""
    part = senders.get(msg.sender)
    if part is None:
        return "unknown_sender"
    meta = msg.meta
    for key in ("snap", "epoch", "mb", "part", "parts", "unit"):
        if not is_count(meta.get(key)):
            return "bad_meta"
    t = meta.get("train_s")
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not t >= 0:
        return "bad_meta"
    if not set(msg.tensors) <= set(names.get(part, ())) or not msg.tensors:
        return "not_owned"
    for name, arr in msg.tensors.items():
        reason = float32_problem(arr, shapes[name], finite=False)
        if reason is not None:
            return reason
    return None


def gradients_problem(
    msg: Message, sender_ok: bool, shapes: Mapping[str, tuple[int, ...]], gen: int = 0
) -> str | None:
    """Why a replica's gradients are unusable (exactly the model's tensors, float32, finite;
    ``gen``: the receiver's generation, older ones stale)."""
    if not sender_ok:
        return "unknown_sender"
    if not is_count(msg.meta.get("epoch")) or not is_count(msg.meta.get("step")):
        return "bad_meta"
    if gen_of(msg.meta) != gen:  # sent before a rewind
        return "stale"
    if set(msg.tensors) != set(shapes):
        return "bad_tensor_names"
    for name, arr in msg.tensors.items():
        reason = float32_problem(arr, shapes[name])
        if reason is not None:
            return reason
    return None
