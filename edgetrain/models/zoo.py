"""The model zoo: build a model by name for an input shape and a number of classes."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor, nn

from edgetrain.errors import ModelError
from edgetrain.models import small
from edgetrain.models.catalog import (
    DESCRIPTIONS,
    MIN_SIDE,
    MODEL_NAMES,
    TORCHVISION_MODELS,
    VISION_FIX,
    torchvision_installed,
)

_SMALL: dict[str, Callable[..., nn.Module]] = {
    "mlp": small.mlp,
    "lenet5": small.lenet5,
    "cnn2": small.cnn2,
}


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_hidden(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(_positive_int(v) for v in value)


def _check_dropout(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1


# Options each model takes: name -> (check, what a valid value looks like).
_OPTIONS: dict[str, dict[str, tuple[Callable[[Any], bool], str]]] = {
    "mlp": {
        "hidden": (_check_hidden, "a list of positive ints such as [128, 64]"),
        "dropout": (_check_dropout, "a float in [0, 1) such as 0.2"),
    },
    "cnn2": {"width": (_positive_int, "a positive int such as 32")},
}


def check_model_config(name: str, options: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`ModelError` for an unknown model, option or option value, or a
    torchvision model where torchvision is not installed; building nothing."""
    if name not in DESCRIPTIONS:
        close = difflib.get_close_matches(name, MODEL_NAMES, n=1)
        known = f"known models: {', '.join(MODEL_NAMES)}"
        hint = f"did you mean '{close[0]}'? ({known})" if close else known
        raise ModelError(f"unknown model '{name}'", hint)
    valid = _OPTIONS.get(name, {})
    for key, value in (options or {}).items():
        if key not in valid:
            raise ModelError(
                f"model '{name}' has no option '{key}'",
                f"valid options: {', '.join(valid) or 'none'}",
            )
        check, expected = valid[key]
        if not check(value):
            raise ModelError(f"model '{name}' option '{key}' = {value!r} is invalid", expected)
    if name in TORCHVISION_MODELS and not torchvision_installed():
        raise ModelError(f"model '{name}' needs torchvision, which is not installed", VISION_FIX)


def _check_shape(input_shape: tuple[int, int, int], num_classes: int) -> None:
    if len(input_shape) != 3 or not all(_positive_int(d) for d in input_shape):
        raise ModelError(
            f"input shape {tuple(input_shape)} is invalid", "expected (C, H, W) of positive ints"
        )
    if not _positive_int(num_classes):
        raise ModelError(f"number of classes {num_classes!r} is invalid", "expected an int >= 1")


def build_model(
    name: str,
    input_shape: tuple[int, int, int],
    num_classes: int,
    options: Mapping[str, Any] | None = None,
) -> nn.Module:
    """Build ``name`` with random initialisation for ``input_shape`` (C, H, W) and classes.

    torchvision models take C input channels (their first convolution is replaced), end in
    ``num_classes`` outputs, and inputs smaller than :data:`MIN_SIDE` are resized up by an
    ``nn.Upsample`` that comes first in an ``nn.Sequential``. Nothing is downloaded.

    Build under ``with torch.device("meta"):`` to count parameters without allocating them.
    """
    options = dict(options or {})
    check_model_config(name, options)
    _check_shape(input_shape, num_classes)
    shape = (int(input_shape[0]), int(input_shape[1]), int(input_shape[2]))
    try:
        if name in _SMALL:
            return _SMALL[name](shape, num_classes, **options)
        return _torchvision(name, shape, num_classes)
    except RuntimeError as exc:  # a feature map shrank to nothing
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(
            f"model '{name}' cannot take input {shape}: {first}", "use a larger input"
        ) from None


def count_parameters(
    name: str,
    input_shape: tuple[int, int, int],
    num_classes: int,
    options: Mapping[str, Any] | None = None,
) -> int:
    """Number of parameters of the model, counted on the meta device (fast, no memory)."""
    import torch

    with torch.device("meta"):
        model = build_model(name, input_shape, num_classes, options)
    return sum(p.numel() for p in model.parameters())


def _first_conv(model: nn.Module) -> tuple[nn.Module, str, nn.Conv2d]:
    """The parent module, attribute name and module of the first Conv2d."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d):
            parent_name, _, attr = name.rpartition(".")
            return model.get_submodule(parent_name) if parent_name else model, attr, module
    raise ModelError("model has no Conv2d to adapt")


def _adapt_channels(model: nn.Module, channels: int) -> None:
    """Replace the first convolution by one taking ``channels`` inputs, otherwise the same."""
    parent, attr, conv = _first_conv(model)
    if conv.in_channels == channels:
        return
    settings: dict[str, Any] = {
        "kernel_size": conv.kernel_size,
        "stride": conv.stride,
        "padding": conv.padding,
        "dilation": conv.dilation,
        "groups": conv.groups,
        "bias": conv.bias is not None,
        "padding_mode": conv.padding_mode,
    }
    setattr(parent, attr, nn.Conv2d(channels, conv.out_channels, **settings))


def _torchvision(name: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    import torchvision.models as tvm

    kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes}
    if name == "googlenet":
        kwargs.update(aux_logits=False, init_weights=True, transform_input=False)
    model: nn.Module = getattr(tvm, name)(**kwargs)
    _adapt_channels(model, input_shape[0])
    side = MIN_SIDE[name]
    size = (max(side, input_shape[1]), max(side, input_shape[2]))
    _exportable_pooling(model, (input_shape[0], *size))
    if size != tuple(input_shape[1:]):
        return nn.Sequential(nn.Upsample(size=size, mode="bilinear", align_corners=False), model)
    return model


def _bins(size: int, out: int) -> tuple[tuple[int, int], ...]:
    """The [start, end) input range of each of ``out`` adaptive-pooling bins over ``size``."""
    return tuple((i * size // out, -(-(i + 1) * size // out)) for i in range(out))


class SlicedAdaptiveAvgPool2d(nn.Module):
    """``nn.AdaptiveAvgPool2d`` for a known input size, as slices and means.

    It computes the same bins as adaptive pooling, but the ONNX exporter can express it for
    any sizes (it refuses adaptive pooling whose output size does not divide the input's).
    Another input size falls back to adaptive pooling. No parameters, no buffers.
    """

    def __init__(self, in_size: tuple[int, int], out_size: tuple[int, int]) -> None:
        super().__init__()
        self.in_size = (int(in_size[0]), int(in_size[1]))
        self.out_size = (int(out_size[0]), int(out_size[1]))
        self.row_bins = _bins(self.in_size[0], self.out_size[0])
        self.col_bins = _bins(self.in_size[1], self.out_size[1])

    def forward(self, x: Tensor) -> Tensor:
        import torch

        if tuple(x.shape[-2:]) != self.in_size:
            return nn.functional.adaptive_avg_pool2d(x, self.out_size)
        rows = [x[..., a:b, :].mean(dim=-2, keepdim=True) for a, b in self.row_bins]
        x = torch.cat(rows, dim=-2)
        cols = [x[..., a:b].mean(dim=-1, keepdim=True) for a, b in self.col_bins]
        return torch.cat(cols, dim=-1)

    def extra_repr(self) -> str:
        return f"in_size={self.in_size}, out_size={self.out_size}"


def _exportable_pooling(model: nn.Module, input_shape: tuple[int, int, int]) -> None:
    """Make VGG and AlexNet exportable to ONNX at any input size, computing the same.

    They pool their features adaptively to 7x7 / 6x6, which the ONNX exporter refuses unless
    the feature map's size is a multiple of that. On a 1x1 map (inputs of 32 to 63 for VGG)
    the pooling only replicates the one value: nearest upsampling does exactly that; on
    other sizes :class:`SlicedAdaptiveAvgPool2d` computes the same bins. Parameters are
    unchanged.
    """
    import torch

    pool = getattr(model, "avgpool", None)
    features = getattr(model, "features", None)
    if not isinstance(pool, nn.AdaptiveAvgPool2d) or features is None:
        return
    with torch.no_grad():
        fmap = tuple(int(d) for d in features(torch.zeros(1, *input_shape)).shape[-2:])
    out: Any = pool.output_size
    size = (out, out) if isinstance(out, int) else tuple(out)
    if None in size or all(f % o == 0 for f, o in zip(fmap, size, strict=True)):
        return  # the exporter handles it
    if fmap == (1, 1):
        model.avgpool = nn.Upsample(size=size, mode="nearest")
    else:
        model.avgpool = SlicedAdaptiveAvgPool2d((fmap[0], fmap[1]), (size[0], size[1]))
