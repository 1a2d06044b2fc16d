"""Model zoo and layer specs: every model trains on small inputs; specs cover every parameter."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from edgetrain.errors import ModelError
from edgetrain.models import (
    MIN_SIDE,
    MODEL_NAMES,
    LayerSpec,
    build_model,
    check_model_config,
    count_parameters,
    layer_specs,
    model_summary,
)
from edgetrain.models.zoo import SlicedAdaptiveAvgPool2d
from tests.helpers.vision import model_params, needs_torchvision

SMALL = ("mlp", "lenet5", "cnn2")
SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32)]  # digits, MNIST, CIFAR


def _param_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _check_covers_every_parameter(model: nn.Module, specs: list[LayerSpec]) -> None:
    names = [p for s in specs for p in s.params]
    assert len(names) == len(set(names))
    assert set(names) == {n for n, _ in model.named_parameters()}
    assert sum(s.param_bytes for s in specs) == _param_bytes(model)
    assert sum(s.num_params for s in specs) == sum(p.numel() for p in model.parameters())
    assert all(s.param_bytes > 0 for s in specs)
    params = dict(model.named_parameters())
    for s in specs:
        assert s.param_shapes == tuple(tuple(params[p].shape) for p in s.params)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", model_params(MODEL_NAMES))
def test_every_model_trains_and_its_specs_cover_every_parameter(name: str, shape) -> None:
    torch.manual_seed(0)
    model = build_model(name, shape, 7)
    model.train()
    specs = layer_specs(model, shape)
    assert model.training  # layer_specs restores the mode
    _check_covers_every_parameter(model, specs)
    out = model(torch.randn(2, *shape))
    assert out.shape == (2, 7)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@needs_torchvision
@pytest.mark.parametrize("name", [n for n in MODEL_NAMES if n not in SMALL])
def test_torchvision_models_adapt_channels_and_size(name: str) -> None:
    with torch.device("meta"):  # structure only: no memory, no initialisation cost
        small_input = build_model(name, (1, 8, 8), 5)
        native = build_model(name, (3, 96, 96), 5)
    assert isinstance(small_input, nn.Sequential)
    resize = small_input[0]
    assert isinstance(resize, nn.Upsample) and resize.mode == "bilinear"
    assert resize.size == (MIN_SIDE[name], MIN_SIDE[name])
    conv = next(m for m in small_input.modules() if isinstance(m, nn.Conv2d))
    ref = next(m for m in native.modules() if isinstance(m, nn.Conv2d))
    assert conv.in_channels == 1 and ref.in_channels == 3
    for attr in ("out_channels", "kernel_size", "stride", "padding"):
        assert getattr(conv, attr) == getattr(ref, attr)
    assert (conv.bias is None) == (ref.bias is None)
    assert not isinstance(native, nn.Sequential) or not isinstance(native[0], nn.Upsample)


@needs_torchvision
def test_min_side_is_just_enough() -> None:
    """Below its minimum side an architecture fails (or degenerates, for ResNet/MobileNet)."""
    import torchvision.models as tvm

    for name, side in (("alexnet", 63), ("squeezenet1_1", 17), ("googlenet", 15)):
        assert MIN_SIDE[name] == side
        kwargs = {"aux_logits": False, "init_weights": False} if name == "googlenet" else {}
        with torch.device("meta"):
            model = getattr(tvm, name)(weights=None, num_classes=3, **kwargs).eval()
            model(torch.zeros(1, 3, side, side))
            with pytest.raises(RuntimeError):
                model(torch.zeros(1, 3, side - 1, side - 1))


@needs_torchvision
def test_non_square_inputs_resize_each_side() -> None:
    model = build_model("googlenet", (3, 10, 40), 4)
    assert model[0].size == (15, 40)
    lenet = build_model("lenet5", (1, 20, 40), 4)
    assert lenet[0].size == (28, 40)
    assert lenet(torch.randn(2, 1, 20, 40)).shape == (2, 4)


@needs_torchvision
def test_vgg_and_alexnet_pooling_is_replaced_by_exact_exportable_forms() -> None:
    with torch.device("meta"):
        vgg32 = build_model("vgg11", (3, 32, 32), 10)  # 1x1 feature map
        vgg64 = build_model("vgg11", (3, 64, 64), 10)  # 2x2
        vgg224 = build_model("vgg11", (3, 224, 224), 10)  # 7x7: left alone
        alex = build_model("alexnet", (3, 100, 90), 10)  # 2x2
    assert isinstance(vgg32.avgpool, nn.Upsample)
    x = torch.randn(2, 512, 1, 1)
    assert torch.equal(vgg32.avgpool.to("cpu")(x), nn.AdaptiveAvgPool2d((7, 7))(x))
    assert isinstance(vgg64.avgpool, SlicedAdaptiveAvgPool2d)
    assert vgg64.avgpool.in_size == (2, 2) and vgg64.avgpool.out_size == (7, 7)
    assert isinstance(vgg224.avgpool, nn.AdaptiveAvgPool2d)
    assert isinstance(alex.avgpool, SlicedAdaptiveAvgPool2d) and alex.avgpool.out_size == (6, 6)


@pytest.mark.parametrize("size", [(1, 1), (2, 2), (3, 5), (7, 7), (9, 16), (20, 3)])
def test_sliced_adaptive_pooling_equals_adaptive_pooling(size: tuple[int, int]) -> None:
    pool = SlicedAdaptiveAvgPool2d(size, (7, 6))
    x = torch.randn(2, 3, *size)
    assert torch.allclose(pool(x), nn.AdaptiveAvgPool2d((7, 6))(x), atol=1e-6)
    other = torch.randn(1, 3, size[0] + 4, size[1] + 4)  # another size: plain adaptive pooling
    assert torch.equal(pool(other), nn.AdaptiveAvgPool2d((7, 6))(other))
    assert not list(pool.parameters()) and not list(pool.buffers())


def test_small_model_options() -> None:
    mlp = build_model("mlp", (1, 8, 8), 10, {"hidden": [32, 16, 8], "dropout": 0.1})
    assert [m.out_features for m in mlp.modules() if isinstance(m, nn.Linear)] == [32, 16, 8, 10]
    assert any(isinstance(m, nn.Dropout) for m in mlp.modules())
    cnn = build_model("cnn2", (1, 28, 28), 10, {"width": 8})
    assert [m.out_channels for m in cnn.modules() if isinstance(m, nn.Conv2d)] == [8, 16]
    lenet = build_model("lenet5", (1, 28, 28), 10)
    assert [m.out_features for m in lenet.modules() if isinstance(m, nn.Linear)] == [120, 84, 10]
    assert lenet[0].in_channels == 1 and lenet[0].padding == (2, 2)


def test_unknown_model_option_and_bad_values() -> None:
    with pytest.raises(ModelError, match="unknown model 'resnet19'.*did you mean 'resnet18'"):
        build_model("resnet19", (3, 32, 32), 10)
    with pytest.raises(ModelError, match="known models: mlp, lenet5"):
        build_model("transformer", (3, 32, 32), 10)
    with pytest.raises(ModelError, match="no option 'depth'.*valid options: hidden, dropout"):
        build_model("mlp", (1, 8, 8), 10, {"depth": 3})
    with pytest.raises(ModelError, match="no option 'width'.*valid options: none"):
        build_model("resnet18", (1, 8, 8), 10, {"width": 3})
    with pytest.raises(ModelError, match="'hidden' = 'big' is invalid.*list of positive ints"):
        build_model("mlp", (1, 8, 8), 10, {"hidden": "big"})
    with pytest.raises(ModelError, match="'dropout' = 1.5"):
        check_model_config("mlp", {"dropout": 1.5})
    with pytest.raises(ModelError, match="'width' = 0"):
        check_model_config("cnn2", {"width": 0})
    with pytest.raises(ModelError, match="input shape"):
        build_model("mlp", (0, 8, 8), 10)
    with pytest.raises(ModelError, match="number of classes"):
        build_model("mlp", (1, 8, 8), 0)
    with pytest.raises(ModelError, match="cannot take input"):
        build_model("cnn2", (1, 2, 2), 10)


@needs_torchvision
def test_count_parameters_matches_a_real_build() -> None:
    for name in ("mlp", "cnn2", "resnet18", "googlenet"):
        model = build_model(name, (3, 32, 32), 10)
        assert count_parameters(name, (3, 32, 32), 10) == sum(p.numel() for p in model.parameters())


@needs_torchvision
def test_listed_parameter_counts_match_the_builds() -> None:
    """`edgetrain models list` reads a static table: every row is what a build counts."""
    from edgetrain.models.catalog import LISTED_CLASSES, LISTED_INPUT, LISTED_PARAMS

    assert list(LISTED_PARAMS) == list(MODEL_NAMES)
    for name in MODEL_NAMES:
        assert count_parameters(name, LISTED_INPUT, LISTED_CLASSES) == LISTED_PARAMS[name], name


@needs_torchvision
def test_layer_specs_of_a_meta_model_need_no_memory() -> None:
    with torch.device("meta"):
        model = build_model("vgg19", (3, 32, 32), 10)
    specs = layer_specs(model, (3, 32, 32))
    assert len(specs) == 19  # 16 convolutions, 3 linear
    assert sum(s.param_bytes for s in specs) == 4 * count_parameters("vgg19", (3, 32, 32), 10)


@needs_torchvision
def test_layer_specs_known_structure() -> None:
    specs = layer_specs(build_model("resnet18", (3, 32, 32), 10), (3, 32, 32))
    assert len(specs) == 41  # 20 convolutions (3 of them downsampling), 20 batch norms, fc
    assert specs[0].name == "conv1" and specs[0].kind == "Conv2d"
    assert specs[0].params == ("conv1.weight",) and specs[0].param_shapes == ((64, 3, 7, 7),)
    assert specs[1].name == "bn1" and specs[1].kind == "BatchNorm2d"
    assert specs[1].params == ("bn1.weight", "bn1.bias")  # running stats are buffers
    assert specs[1].param_bytes == 2 * 64 * 4
    assert specs[2].name == "layer1.0.conv1"
    assert specs[2].folded == ("relu", "maxpool")  # parameter-free modules join the next layer
    assert specs[-1].name == "fc" and specs[-1].kind == "Linear"
    assert specs[-1].folded == ("avgpool",)
    # A downsampling shortcut runs after the block's second convolution, not where registered.
    names = [s.name for s in specs]
    assert names.index("layer2.0.downsample.0") > names.index("layer2.0.bn2")
    lenet = layer_specs(build_model("lenet5", (1, 8, 8), 10), (1, 8, 8))
    assert [s.kind for s in lenet] == ["Conv2d", "Conv2d", "Linear", "Linear", "Linear"]
    assert lenet[0].folded == ("0",)  # the resize up to 28x28 folds into conv1
    mlp = layer_specs(build_model("mlp", (1, 8, 8), 10, {"hidden": [32]}), (1, 8, 8))
    assert [s.name for s in mlp] == ["1", "3"]
    assert mlp[0].folded == ("0",) and mlp[1].folded == ("2",)
    assert model_summary(mlp) == {
        "layers": 2,
        "params": 64 * 32 + 32 + 32 * 10 + 10,
        "bytes": 4 * (64 * 32 + 32 + 32 * 10 + 10),
    }


class _Odd(nn.Module):
    """Execution order differs from registration order; a module runs twice; a parameter
    lives on a non-leaf module; another on the root; a head never runs; trailing activation."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 2)
        self.unused = nn.Linear(4, 4)
        self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.block.register_parameter("scale", nn.Parameter(torch.ones(4)))
        self.first = nn.Linear(3, 4)
        self.act = nn.Tanh()
        self.out_act = nn.Sigmoid()
        self.offset = nn.Parameter(torch.zeros(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.first(x.flatten(1)))
        x = self.block(x) * self.block.scale
        x = self.act(x)  # second call: counts once
        return self.out_act(self.head(x)) + self.offset


def test_execution_order_not_registration_order() -> None:
    model = _Odd()
    specs = layer_specs(model, (1, 1, 3))
    assert [s.name for s in specs] == ["first", "block", "block.0", "head", "<root>", "unused"]
    assert specs[1].params == ("block.scale",) and specs[1].folded == ("act",)
    assert specs[2].folded == ()
    assert specs[3].params == ("head.weight", "head.bias")
    assert specs[3].folded == ("block.1", "out_act")  # trailing ones join the last layer run
    assert specs[4].params == ("offset",) and specs[5].params == ("unused.weight", "unused.bias")
    _check_covers_every_parameter(model, specs)


def test_shared_parameters_count_once() -> None:
    lin = nn.Linear(4, 4)
    model = nn.Sequential(nn.Flatten(), lin, nn.ReLU(), lin)
    specs = layer_specs(model, (1, 1, 4))
    assert len(specs) == 1 and specs[0].params == ("1.weight", "1.bias")
    assert specs[0].folded == ("0", "2")
    assert sum(s.param_bytes for s in specs) == _param_bytes(model)


def test_layer_spec_round_trips_through_json() -> None:
    spec = layer_specs(build_model("cnn2", (1, 8, 8), 10), (1, 8, 8))[0]
    data = json.loads(json.dumps(spec.to_dict()))
    assert data["params"] == ["0.weight", "0.bias"]
    assert data["param_shapes"] == [[32, 1, 3, 3], [32]]
    assert LayerSpec.from_dict(data) == spec
