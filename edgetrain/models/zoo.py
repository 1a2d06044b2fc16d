"""The model zoo: build a model by name for an input shape and a number of classes."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from edgetrain.errors import ModelError
from edgetrain.models import small

# Smallest input side each torchvision architecture runs on; smaller inputs are resized up.
_TV_MIN_SIDE = {
    "resnet18": 32,
    "resnet50": 32,
    "resnet152": 32,
    "mobilenet_v2": 32,
    "vgg11": 32,
    "vgg16": 32,
    "vgg19": 32,
    "squeezenet1_1": 64,
    "alexnet": 64,
    "googlenet": 32,
}

DESCRIPTIONS = {
    "mlp": "multi-layer perceptron (options: hidden, dropout)",
    "lenet5": "LeNet-5, 2 conv + 3 FC",
    "cnn2": "DLion's 2 conv + 2 FC CNN (option: width)",
    "resnet18": "torchvision ResNet-18",
    "resnet50": "torchvision ResNet-50",
    "resnet152": "torchvision ResNet-152",
    "mobilenet_v2": "torchvision MobileNetV2",
    "vgg11": "torchvision VGG-11",
    "vgg16": "torchvision VGG-16",
    "vgg19": "torchvision VGG-19",
    "squeezenet1_1": "torchvision SqueezeNet 1.1",
    "alexnet": "torchvision AlexNet",
    "googlenet": "torchvision GoogLeNet (no auxiliary heads)",
}
MODEL_NAMES: tuple[str, ...] = tuple(DESCRIPTIONS)

_SMALL: dict[str, Callable[..., nn.Module]] = {
    "mlp": small.mlp,
    "lenet5": small.lenet5,
    "cnn2": small.cnn2,
}


def _first_conv(model: nn.Module) -> tuple[nn.Module, str, nn.Conv2d]:
    """The parent module, attribute name and module of the first Conv2d."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d):
            parent_name, _, attr = name.rpartition(".")
            return model.get_submodule(parent_name) if parent_name else model, attr, module
    raise ModelError("model has no Conv2d to adapt")


def _adapt_channels(model: nn.Module, channels: int) -> None:
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
    }
    setattr(parent, attr, nn.Conv2d(channels, conv.out_channels, **settings))


def _torchvision(name: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    import torchvision.models as tvm

    kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes}
    if name == "googlenet":
        kwargs.update(aux_logits=False, init_weights=True, transform_input=False)
    model: nn.Module = getattr(tvm, name)(**kwargs)
    _adapt_channels(model, input_shape[0])
    side = _TV_MIN_SIDE[name]
    size = (max(side, input_shape[1]), max(side, input_shape[2]))
    _replicate_small_feature_maps(model, (input_shape[0], *size))
    if size != tuple(input_shape[1:]):
        return nn.Sequential(nn.Upsample(size=size, mode="bilinear", align_corners=False), model)
    return model


def _replicate_small_feature_maps(model: nn.Module, input_shape: tuple[int, int, int]) -> None:
    """VGG and AlexNet pool their features to 7x7 / 6x6 adaptively. On a 1x1 feature map that
    pooling only replicates it, which ONNX cannot express; nearest upsampling computes the same
    thing and exports. Parameters are unchanged."""
    import torch

    pool = getattr(model, "avgpool", None)
    features = getattr(model, "features", None)
    if not isinstance(pool, nn.AdaptiveAvgPool2d) or features is None:
        return
    with torch.no_grad():
        fmap = features(torch.zeros(1, *input_shape)).shape[-2:]
    if tuple(fmap) == (1, 1):
        out: Any = pool.output_size
        size = (out, out) if isinstance(out, int) else tuple(out)
        model.avgpool = nn.Upsample(size=size, mode="nearest")


def check_model_config(name: str, options: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`ModelError` for an unknown model or option, without building anything."""
    if name not in DESCRIPTIONS:
        close = difflib.get_close_matches(name, MODEL_NAMES, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(MODEL_NAMES)}"
        raise ModelError(f"unknown model '{name}'", hint)
    fn = _SMALL.get(name)
    valid = (
        [p for p in inspect.signature(fn).parameters if p not in ("input_shape", "num_classes")]
        if fn is not None
        else []
    )
    for key in options or {}:
        if key not in valid:
            raise ModelError(
                f"model '{name}' has no option '{key}'",
                f"valid options: {', '.join(valid) or 'none'}",
            )


def build_model(
    name: str,
    input_shape: tuple[int, int, int],
    num_classes: int,
    options: Mapping[str, Any] | None = None,
) -> nn.Module:
    """Build ``name`` with random initialisation for ``input_shape`` (C, H, W) and classes."""
    options = dict(options or {})
    check_model_config(name, options)
    if name in _SMALL:
        try:
            return _SMALL[name](input_shape, num_classes, **options)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ModelError(f"model '{name}' cannot be built with {options}: {exc}") from None
    try:
        return _torchvision(name, input_shape, num_classes)
    except RuntimeError as exc:
        raise ModelError(f"model '{name}' cannot take input {input_shape}: {exc}") from None
