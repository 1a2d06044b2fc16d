"""Start-up of a worker's torch without ``torch._dynamo``: the compiler, which no worker uses.

Importing ``torch._dynamo`` costs 1.3 s and more of CPU (more on a small board), in every
worker, and two wrappers in ``torch.optim`` import it on their first call:

- ``add_param_group``, ``zero_grad``, ``state_dict`` and ``load_state_dict`` are wrapped in
  ``torch._disable_dynamo``, whose wrapper calls the function it keeps in the function's
  ``__dynamo_disable`` attribute once set: set to the function itself, it calls the
  optimizer's own code;
- ``step`` is wrapped in ``_use_grad_for_differentiable``, which sets the grad mode to the
  optimizer's ``differentiable`` default around the step and marks a graph break for the
  compiler: replaced by a wrapper that sets the same grad mode around the same step.

Either way the optimizer runs exactly the code it runs without a compiler. Only wrappers whose
code is torch's own are touched, only before ``torch._dynamo`` is imported and before an
optimizer of the class exists, and nothing in edgetrain calls ``torch.compile`` (a compiled
caller would now trace these functions instead of skipping them). ``EDGETRAIN_TORCH_DYNAMO=1``
leaves torch as it is.
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any

__all__ = ["skip_dynamo_import"]


def _code_of(module: Any, wrapper: str) -> Any:
    """The code object of the function ``module.wrapper`` wraps others in (None: torch has
    no such wrapper): a wrapped function is torch's own wrapper when its code is this."""
    wrap = getattr(module, wrapper, None)
    if wrap is None:
        return None

    def probe() -> None:
        return None

    return getattr(wrap(probe), "__code__", None)


def _eager_step(step: Any) -> Any:
    """``step`` (an optimizer's own step) under the grad mode its wrapper sets, no compiler."""
    import functools

    import torch

    @functools.wraps(step)
    def eager(self: Any, *args: Any, **kwargs: Any) -> Any:
        previous = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(bool(self.defaults.get("differentiable", False)))
            return step(self, *args, **kwargs)
        finally:
            torch.set_grad_enabled(previous)

    return eager


def skip_dynamo_import() -> int:
    """Make the optimizers' dynamo-disabled methods call their own code; the number patched
    (0 where there is nothing to do or torch is another shape)."""
    if os.environ.get("EDGETRAIN_TORCH_DYNAMO") == "1" or "torch._dynamo" in sys.modules:
        return 0
    import torch.optim
    from torch.optim import optimizer

    code = _code_of(torch, "_disable_dynamo")
    use_grad = _code_of(optimizer, "_use_grad_for_differentiable")
    if code is None:
        return 0
    patched = 0
    classes = [c for c in vars(torch.optim).values() if inspect.isclass(c)]
    for cls in classes:
        if not issubclass(cls, torch.optim.Optimizer):
            continue
        step = vars(cls).get("step")
        own = getattr(step, "__wrapped__", None)
        wrapped = use_grad is not None and getattr(step, "__code__", None) is use_grad
        if wrapped and own is not None and not getattr(step, "hooked", False):
            cls.step = _eager_step(own)  # type: ignore[method-assign]
            patched += 1
        for value in vars(cls).values():
            inner = getattr(value, "__wrapped__", None)
            if getattr(value, "__code__", None) is not code or inner is None:
                continue
            if getattr(inner, "__dynamo_disable", None) is None:
                try:
                    inner.__dynamo_disable = inner
                except (AttributeError, TypeError):
                    continue
                patched += 1
    return patched
