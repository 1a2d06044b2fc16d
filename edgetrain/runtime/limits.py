"""A run's message limits, from its model: the largest message it can legitimately send.

The launcher computes them once (:func:`run_limits`) and hands them to the coordinator and to
every worker (``edgetrain worker --max-message-bytes --max-tensors``); every socket of the run
then refuses bigger frames in ZeroMQ itself and every receipt drops a message of more frames
or tensors than they allow (:class:`edgetrain.comm.wire.Limits`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgetrain.comm.wire import Limits, limits_for

if TYPE_CHECKING:
    import torch

    from edgetrain.data import Dataset
    from edgetrain.recipe import Recipe
    from edgetrain.runtime.base import WireLoad


def _largest_output(model: torch.nn.Module, sample: torch.Tensor) -> int:
    """Bytes of the largest output of any module of ``model`` for one ``sample`` (eval mode)."""
    import torch

    largest = [int(sample.numel() * sample.element_size())]

    def hook(_module: Any, _inputs: Any, output: Any) -> None:
        outs = output if isinstance(output, (tuple, list)) else (output,)
        for out in outs:
            if isinstance(out, torch.Tensor):
                largest[0] = max(largest[0], int(out.numel() * out.element_size()))

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(sample)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return largest[0]


def model_limits(
    model: torch.nn.Module, sample: torch.Tensor, batch_size: int, data_bytes: int = 0
) -> Limits:
    """The limits of a run of ``model`` on batches of ``batch_size`` samples like ``sample``
    (one sample, with its batch dimension)."""
    state = model.state_dict()
    state_bytes = sum(int(t.numel() * t.element_size()) for t in state.values())
    activation = _largest_output(model, sample) * batch_size
    return limits_for(state_bytes, len(state), activation, data_bytes)


def run_limits(recipe: Recipe, data: Dataset, load: WireLoad) -> Limits:
    """The limits of ``recipe``'s run on ``data`` (builds its model once, on this machine);
    ``load``: what its technique's messages carry beyond the model (its side's ``wire_load``)."""
    import torch

    from edgetrain.runtime.setup import build_run_model

    model = build_run_model(recipe, data)
    sample = torch.from_numpy(data.x_train[:1].copy())
    return model_limits(model, sample, load.batch, load.extra_bytes)
