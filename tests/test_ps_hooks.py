"""The schedule inside the model: forward waits for each segment's pull in the planned order, and
each backward segment's push is released the moment its last gradient exists."""

from __future__ import annotations

import threading

import torch
from torch import nn

from edgetrain.models import build_model
from edgetrain.ps.hooks import SegmentHooks, backward_segments, segments
from edgetrain.ps.layout import build_layout


class Recorded(threading.Event):
    """An event that notes, in a shared log, when it was set."""

    def __init__(self, name: str, log: list[str]) -> None:
        super().__init__()
        self.name, self.log = name, log

    def set(self) -> None:
        if not self.is_set():
            self.log.append(f"release {self.name}")
        super().set()


def test_waits_and_pushes_follow_the_cuts() -> None:
    torch.manual_seed(0)
    model = build_model("lenet5", (1, 28, 28), 10)
    layout = build_layout(model, (1, 28, 28), servers=2)
    L = len(layout.specs)
    assert L == 5
    log: list[str] = []

    def wait(event: threading.Event, what: str) -> None:
        assert event.is_set(), f"{what} waited before its pull landed"
        log.append(f"wait {what}")

    hooks = SegmentHooks(model, layout, wait)
    # the layers each parameter belongs to, to see when a segment's last gradient is in
    layer_of = {p: i + 1 for i, s in enumerate(layout.specs) for p in s.params}
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(
            lambda _t, name=name: log.append(f"grad layer {layer_of[name]}")
        )
    fwd = segments([1, 3], L)  # (1,1) (2,3) (4,5)
    bwd = backward_segments([2], L)  # (3,5) then (1,2)
    pulls = [threading.Event() for _ in fwd]
    for e in pulls:
        e.set()  # the pulls have landed
    grads = [Recorded(f"push {j + 1} layers {a}-{b}", log) for j, (a, b) in enumerate(bwd)]
    hooks.arm(fwd, pulls, bwd, grads)
    x, y = torch.randn(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])
    loss = nn.functional.cross_entropy(model(x), y)
    assert [e for e in log if e.startswith("wait")] == ["wait pull 1", "wait pull 2", "wait pull 3"]
    loss.backward()
    hooks.backward_done()
    backward = [e for e in log if not e.startswith("wait")]
    # push 1 (layers 3-5) right after layer 3's last gradient, before layer 2's arrives;
    # push 2 (layers 1-2) after layer 1's
    first = backward.index("release push 1 layers 3-5")
    assert all(e in backward[:first] for e in ("grad layer 5", "grad layer 4", "grad layer 3"))
    assert backward[first + 1 :].count("release push 2 layers 1-2") == 1
    second = backward.index("release push 2 layers 1-2")
    assert "grad layer 1" in backward[:second] and "grad layer 2" in backward[first:second]
    times = hooks.times
    assert times.forward(L).sum() > 0 and (times.forward(L) >= 0).all()
    assert len(times.done) == L and (times.backward(L) >= 0).all()
    hooks.remove()


def test_a_device_is_waited_for_before_every_time_taken() -> None:
    """On a GPU a layer's time must be its compute, not its kernel launches: the hooks call
    ``sync`` (``torch.cuda.synchronize`` there) before each layer's start, each layer's last
    gradient and the end of backward; a push is released after that sync."""
    torch.manual_seed(0)
    model = build_model("lenet5", (1, 28, 28), 10)
    layout = build_layout(model, (1, 28, 28), servers=1)
    L = len(layout.specs)
    log: list[str] = []
    hooks = SegmentHooks(model, layout, lambda e, what: None, lambda: log.append("sync"))
    fwd, bwd = segments([], L), backward_segments([], L)
    pulls = [threading.Event() for _ in fwd]
    for e in pulls:
        e.set()
    grads = [Recorded("push", log) for _ in bwd]
    hooks.arm(fwd, pulls, bwd, grads)
    nn.functional.cross_entropy(model(torch.randn(2, 1, 28, 28)), torch.tensor([0, 1])).backward()
    hooks.backward_done()
    # L layer starts + L last gradients + the end of backward
    assert log.count("sync") == 2 * L + 1
    assert log.index("release push") > log.index("sync")
    assert log[log.index("release push") - 1] == "sync"
    hooks.remove()
