"""The one weight-gradient function every schedule shares, the linearity probe, the update.

``weight_grad(leaf, x, delta, weights)`` turns one call's (layer input, output error) pair into
the layer's parameter gradients: explicit formulas for Linear, ConvNd, BatchNorm and LayerNorm
(fast, no forward recompute), the generic autograd fallback for anything else. PipeDream and
GreedyUpdates call it at a microbatch's backward; mcPipe calls it when it replays a pending pair
onto its base. Because all of them call the same function on the same pairs, mcPipe's weights
on demand equal PipeDream's stashed ones bit for bit (specification §6.5).

The formulas hold only for layers whose output is linear in their own parameters; the probe
finds the others (LSTM, weight-normalised layers, products of parameters), which must be kept
as weight versions. :func:`sgd_step` is the single SGD step (momentum and weight decay with
torch's semantics) every store uses.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from torch.nn.utils import parametrize

Grads = dict[str, torch.Tensor]

_CONV = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}
_BN = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
_CONV_WEIGHT = {
    1: torch.nn.grad.conv1d_weight,  # type: ignore[attr-defined]
    2: torch.nn.grad.conv2d_weight,  # type: ignore[attr-defined]
    3: torch.nn.grad.conv3d_weight,  # type: ignore[attr-defined]
}


def has_formula(module: nn.Module) -> bool:
    """True if :func:`weight_grad` has an explicit formula for this module."""
    if type(module) in _CONV:
        return getattr(module, "padding_mode", "zeros") == "zeros"
    return type(module) in (nn.Linear, nn.LayerNorm, *_BN)


def own_names(module: nn.Module) -> list[str]:
    """The names ``module.named_parameters(recurse=False)`` gives, without its generator's cost
    (called per layer per update)."""
    seen: set[int] = set()
    names = []
    for n, p in module._parameters.items():
        if p is not None and id(p) not in seen:
            seen.add(id(p))
            names.append(n)
    return names


def weight_grad(
    module: nn.Module,
    x: torch.Tensor,
    delta: torch.Tensor,
    weights: Mapping[str, torch.Tensor] | None = None,
) -> Grads:
    """Gradients of the module's own parameters (names as in ``named_parameters(recurse=False)``)
    from its input ``x`` and output error ``delta``. ``weights`` (the module's parameters at the
    version the error was computed with) matter only for the generic fallback."""
    kind = type(module)
    out: Grads = {}
    if kind is nn.Linear:
        d2 = delta.reshape(-1, delta.shape[-1])
        x2 = x.reshape(-1, x.shape[-1])
        out["weight"] = torch.mm(d2.t(), x2)
        if module._parameters.get("bias") is not None:
            out["bias"] = d2.sum(0)
        return out
    names = own_names(module)
    if kind in _CONV and has_formula(module):
        conv = module
        assert isinstance(conv, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
        grad_fn = _CONV_WEIGHT[_CONV[kind]]
        out["weight"] = grad_fn(
            x, conv.weight.shape, delta, conv.stride, conv.padding, conv.dilation, conv.groups
        )
        if "bias" in names:
            out["bias"] = delta.sum(dim=[d for d in range(delta.dim()) if d != 1])
        return out
    if isinstance(module, _BN) and kind in _BN:
        dims = [d for d in range(delta.dim()) if d != 1]
        xhat = F.batch_norm(x, None, None, training=True, momentum=0.0, eps=module.eps)
        if "weight" in names:
            out["weight"] = (delta * xhat).sum(dim=dims)
        if "bias" in names:
            out["bias"] = delta.sum(dim=dims)
        return out
    if kind is nn.LayerNorm:
        ln = module
        assert isinstance(ln, nn.LayerNorm)
        lead = x.dim() - len(ln.normalized_shape)
        xhat = F.layer_norm(x, ln.normalized_shape, None, None, ln.eps)
        dims = list(range(lead))
        if "weight" in names:
            out["weight"] = (delta * xhat).sum(dim=dims)
        if "bias" in names:
            out["bias"] = delta.sum(dim=dims)
        return out
    return generic_weight_grad(module, x, delta, weights)


def generic_weight_grad(
    module: nn.Module,
    x: torch.Tensor,
    delta: torch.Tensor,
    weights: Mapping[str, torch.Tensor] | None = None,
) -> Grads:
    """The fallback: run the module on ``x`` with its parameters as leaves (and copies of its
    buffers, so running statistics are not touched) and back-propagate ``delta``."""
    own = dict(module.named_parameters(recurse=False))
    source = weights if weights is not None else own
    params = {n: source[n].detach().clone().requires_grad_(True) for n in own}
    buffers = {n: b.detach().clone() for n, b in module.named_buffers(recurse=False)}
    with torch.enable_grad():
        y = _first(functional_call(module, {**params, **buffers}, (x.detach(),)))
        grads = torch.autograd.grad(y, list(params.values()), delta, allow_unused=True)
    return {
        n: g if g is not None else torch.zeros_like(params[n])
        for n, g in zip(params, grads, strict=True)
    }


def linear_in_params(module: nn.Module, x: torch.Tensor, seed: int = 0) -> bool:
    """The probe: is the module's parameter gradient independent of its parameters?

    Computes the generic gradient for one random (input, error) pair at the module's own
    parameters and at random ones; a layer linear in its parameters gives the same both times.
    ``x`` is an example input (any batch size)."""
    if parametrize.is_parametrized(module):
        # its weights live in the parametrisation (weight norm: g * v / |v|), a function of
        # parameters this module does not own: not linear in them, so never kept as pairs
        return False
    gen = torch.Generator().manual_seed(seed)
    own = dict(module.named_parameters(recurse=False))
    if not own:
        return True
    x = torch.randn(x.shape, generator=gen, dtype=x.dtype)
    was = module.training
    module.train()
    try:
        with torch.no_grad():
            y = functional_call(
                module,
                {
                    **{n: p.detach() for n, p in own.items()},
                    **{n: b.detach().clone() for n, b in module.named_buffers(recurse=False)},
                },
                (x,),
            )
        delta = torch.randn(_first(y).shape, generator=gen, dtype=x.dtype)
        at_own = generic_weight_grad(module, x, delta, None)
        other = {n: torch.randn(p.shape, generator=gen, dtype=p.dtype) for n, p in own.items()}
        at_other = generic_weight_grad(module, x, delta, other)
    finally:
        module.train(was)
    return all(_close(at_own[n], at_other[n]) for n in own)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    scale = 1.0 + float(a.abs().max()) if a.numel() else 1.0
    return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5 * scale))


def _first(y: object) -> torch.Tensor:
    if isinstance(y, torch.Tensor):
        return y
    if isinstance(y, (tuple, list)) and y and isinstance(y[0], torch.Tensor):
        return y[0]
    raise TypeError(f"a layer returned {type(y).__name__}, not a tensor")


def sgd_step(
    w: torch.Tensor,
    g: torch.Tensor,
    lr: float,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    buf: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """One SGD step of ``w`` by ``g`` (torch.optim.SGD's arithmetic, buffer starting at zero):
    ``d = g + wd*w``; ``buf = mu*buf + d`` (in place); ``w - lr*(buf or d)``, written into
    ``out`` (``w`` itself for an in-place step), for a caller already under
    ``torch.no_grad()`` (a store stepping many tensors enters it once). Every store steps
    through here."""
    d = g if weight_decay == 0 else g.add(w, alpha=weight_decay)
    if momentum:
        assert buf is not None, "momentum needs a buffer"
        buf.mul_(momentum).add_(d)
        d = buf
    if out is None:
        return w.add_(d, alpha=-lr)
    return torch.add(w, d, alpha=-lr, out=out)
