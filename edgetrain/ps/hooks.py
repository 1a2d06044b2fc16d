"""The schedule executed inside the model: a forward segment waits for its pull, a backward
segment's push starts when its last gradient is accumulated; per-layer compute is timed.

A forward pre-hook on the first module of every layer (a folded activation or pooling, or the
layer itself) marks the layer's start; on the first layer of a segment it first waits for that
segment's pull. The wait is not compute: a layer's forward time runs from the end of its own
wait to the start of the next layer (before that layer's wait), the loss is charged to the last
layer. A post-accumulate-grad hook on every parameter counts down its layer and its backward
segment: the segment's push is released the moment its last gradient exists, while backward
goes on (hooks only set an event; the link thread sends). Layers finish backward in whatever
order autograd runs them; each is charged the time since the previous layer finished.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetrain.ps.layout import Layout


def segments(cuts: Sequence[int], layers: int) -> list[tuple[int, int]]:
    """Forward segments ``(first, last)`` (1-based, inclusive) from cuts, in forward order."""
    ends = [*sorted(cuts), layers]
    out, first = [], 1
    for end in ends:
        out.append((first, end))
        first = end + 1
    return out


def backward_segments(cuts: Sequence[int], layers: int) -> list[tuple[int, int]]:
    """Backward segments in the order backward runs them: from layer L down."""
    return list(reversed(segments(cuts, layers)))


@dataclass
class IterationTimes:
    """What one iteration's hooks saw (``time.perf_counter`` seconds)."""

    starts: dict[int, tuple[float, float]] = field(
        default_factory=dict
    )  # layer: before, after wait
    done: dict[int, float] = field(default_factory=dict)  # layer: backward finished
    loss_end: float = 0.0
    backward_start: float = 0.0
    backward_end: float = 0.0

    def forward(self, layers: int) -> np.ndarray:
        out = np.zeros(layers)
        for layer in range(layers):
            if layer not in self.starts:
                continue
            nxt = self.starts.get(layer + 1)
            end = nxt[0] if nxt is not None else self.loss_end
            out[layer] = max(0.0, end - self.starts[layer][1])
        return out

    def backward(self, layers: int) -> np.ndarray:
        out = np.zeros(layers)
        prev = self.backward_start
        for layer, t in sorted(self.done.items(), key=lambda kv: kv[1]):
            out[layer] = max(0.0, t - prev)
            prev = t
        if self.done:  # what follows the last gradient (the rest of backward) goes to it
            last = max(self.done, key=lambda k: self.done[k])
            out[last] += max(0.0, self.backward_end - prev)
        return out

    def compute_spans(self, layers: int) -> list[tuple[float, float]]:
        """Intervals the compute thread was computing (not waiting for a pull)."""
        spans = []
        for layer in range(layers):
            if layer in self.starts:
                nxt = self.starts.get(layer + 1)
                spans.append((self.starts[layer][1], nxt[0] if nxt is not None else self.loss_end))
        spans.append((self.backward_start, self.backward_end))
        return spans


class SegmentHooks:
    """Hooks on one model, re-armed every iteration with that iteration's segments."""

    def __init__(
        self,
        model: nn.Module,
        layout: Layout,
        wait: Callable[[threading.Event, str], None],
        sync: Callable[[], None] | None = None,
    ) -> None:
        """``sync``: waits for the device's queued work (``torch.cuda.synchronize`` on a GPU,
        None on the CPU), called before every time taken, so a layer's time is its compute
        and not its kernel launches, and a push's gradients exist when it is released."""
        self.layout = layout
        self.layers = len(layout.specs)
        self.wait = wait
        self.sync = sync or (lambda: None)
        self.module_layer: dict[str, int] = {}
        for i, spec in enumerate(layout.specs):
            for name in (*spec.folded, spec.name):
                self.module_layer.setdefault(name, i)
        self.param_layer = {p: i for i, spec in enumerate(layout.specs) for p in spec.params}
        self.times = IterationTimes()
        self._heads: dict[int, tuple[threading.Event, str]] = {}
        self._layer_left: list[int] = []
        self._seg_of: list[int] = []
        self._seg_left: list[int] = []
        self._seg_ready: list[threading.Event] = []
        self._current = -1
        self._handles: list[Any] = []
        modules = dict(model.named_modules())
        for name, idx in self.module_layer.items():
            if name in modules:
                self._handles.append(modules[name].register_forward_pre_hook(self._pre(idx)))
        for pname, p in model.named_parameters():
            if pname in self.param_layer and p.requires_grad:
                self._handles.append(p.register_post_accumulate_grad_hook(self._grad(pname)))

    def arm(
        self,
        forward: Sequence[tuple[int, int]],
        pulls: Sequence[threading.Event],
        backward: Sequence[tuple[int, int]],
        grads: Sequence[threading.Event],
    ) -> None:
        """Before an iteration: which layers wait for which pull, which gradients release
        which push."""
        self.times = IterationTimes()
        self._current = -1
        self._heads = {
            first - 1: (pulls[j], f"pull {j + 1}") for j, (first, _) in enumerate(forward)
        }
        self._layer_left = [len(s.params) for s in self.layout.specs]
        self._seg_of = [0] * self.layers
        for j, (first, last) in enumerate(backward):
            for layer in range(first - 1, last):
                self._seg_of[layer] = j
        self._seg_left = [last - first + 1 for first, last in backward]
        self._seg_ready = list(grads)

    def _pre(self, idx: int) -> Callable[..., None]:
        def hook(_m: nn.Module, _inp: Any) -> None:
            if idx <= self._current:
                return
            self._current = idx
            self.sync()
            before = time.perf_counter()
            head = self._heads.get(idx)
            if head is not None:
                self.wait(*head)
            self.times.starts[idx] = (before, time.perf_counter())

        return hook

    def _grad(self, pname: str) -> Callable[[torch.Tensor], None]:
        layer = self.param_layer[pname]

        def hook(_p: torch.Tensor) -> None:
            self._layer_left[layer] -= 1
            if self._layer_left[layer] == 0:
                self.sync()
                self.times.done[layer] = time.perf_counter()
                seg = self._seg_of[layer]
                self._seg_left[seg] -= 1
                if self._seg_left[seg] == 0:
                    self._seg_ready[seg].set()

        return hook

    def backward_done(self) -> None:
        """After backward: release every push still held (a layer without gradients)."""
        self.sync()
        self.times.backward_end = time.perf_counter()
        for event in self._seg_ready:
            event.set()

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
