"""Per-layer attribution of one training step's wall time, by hooks on the real model.

One hooked step is split into contiguous intervals, each charged to one layer spec, so the
per-layer times add up to the step's time by construction:

- forward: a layer's segment starts when the first module it owns (a folded parameter-free
  module or the layer itself) is entered, and lasts until the next layer's segment starts.
  Work between modules (residual additions in a parent's ``forward``) goes to the segment
  that is running; a module called again later (a shared ReLU) does not move the segment
  back. The loss is charged to the last segment.
- backward: autograd runs layers from last to first; when the gradients of a layer's
  parameters have been accumulated, the time since the previous such event is charged to it
  (the first layer to finish also pays for the loss's backward).
- optimizer: ``zero_grad`` plus ``step`` is split over the layers in proportion to their
  parameter counts (SGD's update is element-wise) and added to their backward time.

On CUDA every hook synchronises, so the times are the device's, not the launch queue's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetrain.models.layers import LayerSpec


def _nbytes(out: Any) -> int:
    if isinstance(out, torch.Tensor):
        return int(out.numel() * out.element_size())
    if isinstance(out, (tuple, list)):
        return sum(_nbytes(o) for o in out)
    return 0


@dataclass
class StepTimes:
    """The per-layer seconds of one hooked step, and what it measured along the way."""

    fwd: np.ndarray
    bwd: np.ndarray
    total_s: float
    activation_bytes: list[int] = field(default_factory=list)


class LayerTimeline:
    """Hooks a model so that :meth:`step` returns per-layer forward/backward times."""

    def __init__(self, model: nn.Module, specs: list[LayerSpec], device: str) -> None:
        self.model = model
        self.specs = specs
        self.n = len(specs)
        self.cuda = device.startswith("cuda")
        self.owner: dict[str, int] = {}
        for i, s in enumerate(specs):
            for name in (*s.folded, s.name):
                self.owner.setdefault(name, i)
        counts = np.array([s.num_params for s in specs], dtype=float)
        self.param_share = counts / counts.sum() if counts.sum() > 0 else counts
        self._fwd_events: list[tuple[float, int]] = []
        self._bwd_events: list[tuple[float, int]] = []
        self._act = [0] * self.n
        self._current = -1

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def _attach(self) -> list[Any]:
        handles: list[Any] = []
        modules = dict(self.model.named_modules())
        for name, idx in self.owner.items():
            module = modules.get(name)
            if module is None:
                continue
            handles.append(module.register_forward_pre_hook(self._pre(idx)))
            handles.append(module.register_forward_hook(self._post()))
        params = dict(self.model.named_parameters())
        for idx, spec in enumerate(self.specs):
            for pname in spec.params:
                p = params.get(pname)
                if p is not None and p.requires_grad:
                    handles.append(p.register_post_accumulate_grad_hook(self._grad(idx)))
        return handles

    def _pre(self, idx: int) -> Callable[..., None]:
        def hook(_m: nn.Module, _inp: Any) -> None:
            if idx > self._current:
                self._current = idx
                self._fwd_events.append((self._now(), idx))

        return hook

    def _post(self) -> Callable[..., None]:
        def hook(_m: nn.Module, _inp: Any, out: Any) -> None:
            if self._current >= 0:
                self._act[self._current] = _nbytes(out)

        return hook

    def _grad(self, idx: int) -> Callable[[torch.Tensor], None]:
        def hook(_p: torch.Tensor) -> None:
            self._bwd_events.append((self._now(), idx))

        return hook

    def step(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        optimizer: torch.optim.Optimizer,
    ) -> StepTimes:
        """Run one training step with the hooks attached; return its per-layer times."""
        self._fwd_events, self._bwd_events = [], []
        self._act, self._current = [0] * self.n, -1
        handles = self._attach()
        try:
            t0 = self._now()
            optimizer.zero_grad(set_to_none=True)
            t_f0 = self._now()
            loss = loss_fn(self.model(x), y)
            t_b0 = self._now()
            loss.backward()
            t_o0 = self._now()
            optimizer.step()
            t_end = self._now()
        finally:
            for h in handles:
                h.remove()
        fwd = _charge(self._fwd_events, t_f0, t_b0, self.n, forward=True)
        bwd = _charge(self._bwd_events, t_b0, t_o0, self.n, forward=False)
        bwd += self.param_share * ((t_end - t_o0) + (t_f0 - t0))
        return StepTimes(fwd=fwd, bwd=bwd, total_s=t_end - t0, activation_bytes=list(self._act))


def _charge(
    events: list[tuple[float, int]], start: float, end: float, n: int, forward: bool
) -> np.ndarray:
    """Split [start, end) into per-layer seconds at the event times (see the module docstring).

    Forward: an event opens its layer's interval. Backward: an event closes its layer's
    interval. Time before the first forward event goes to the first layer to run; time
    after the last backward event goes to the last layer to finish.
    """
    out = np.zeros(n)
    if not events:
        if n:
            out[-1 if forward else 0] += end - start
        return out
    events = sorted(events)
    if forward:
        times = [start] + [t for t, _ in events[1:]] + [end]
        for k, (_, idx) in enumerate(events):
            out[idx] += times[k + 1] - times[k]
        return out
    prev = start
    for t, idx in events:
        out[idx] += t - prev
        prev = t
    out[events[-1][1]] += end - prev
    return out
