"""Model zoo: every model trains on small inputs; layer specs; ONNX export and re-import."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from edgetrain.errors import ModelError
from edgetrain.models import MODEL_NAMES, build_model, export_onnx, layer_specs, onnx_layer_specs

SMALL = ("mlp", "lenet5", "cnn2")
HEAVY = ("resnet50", "resnet152", "vgg16", "vgg19")  # specs only: a forward pass is slow


def _param_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.mark.parametrize("shape", [(1, 8, 8), (1, 28, 28), (3, 32, 32)])
@pytest.mark.parametrize("name", SMALL)
def test_small_models_train(name: str, shape: tuple[int, int, int]) -> None:
    model = build_model(name, shape, 10)
    out = model(torch.randn(4, *shape))
    assert out.shape == (4, 10)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", [n for n in MODEL_NAMES if n not in SMALL])
def test_torchvision_models_adapt_and_cover_every_parameter(name: str) -> None:
    shape = (1, 8, 8)  # digits: one channel, far smaller than ImageNet
    model = build_model(name, shape, 7)
    specs = layer_specs(model, shape)
    names = [p for s in specs for p in s.params]
    assert len(names) == len(set(names))
    assert set(names) == {n for n, _ in model.named_parameters()}
    assert sum(s.param_bytes for s in specs) == _param_bytes(model)
    assert all(s.param_bytes > 0 for s in specs)
    if name not in HEAVY:
        model.train()
        out = model(torch.randn(2, *shape))
        assert out.shape == (2, 7)


def test_layer_specs_known_structure() -> None:
    specs = layer_specs(build_model("resnet18", (3, 32, 32), 10), (3, 32, 32))
    assert len(specs) == 41  # 20 convolutions (3 of them downsampling), 20 batch norms, fc
    assert specs[0].name == "conv1" and specs[0].kind == "Conv2d"
    assert specs[1].name == "bn1" and specs[1].kind == "BatchNorm2d"
    assert specs[-1].name == "fc" and specs[-1].kind == "Linear"
    assert "avgpool" in specs[-1].folded  # parameter-free modules join the next layer
    assert "maxpool" in specs[2].folded and "relu" in specs[2].folded
    lenet = layer_specs(build_model("lenet5", (1, 8, 8), 10), (1, 8, 8))
    assert [s.kind for s in lenet] == ["Conv2d", "Conv2d", "Linear", "Linear", "Linear"]
    assert lenet[0].folded == ("0",)  # the resize up to 28x28 folds into conv1


def test_execution_order_not_registration_order() -> None:
    class Backwards(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.second = torch.nn.Linear(4, 2)
            self.first = torch.nn.Linear(3, 4)
            self.act = torch.nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.second(self.act(self.first(x.flatten(1))))

    specs = layer_specs(Backwards(), (1, 1, 3))
    assert [s.name for s in specs] == ["first", "second"]
    assert specs[1].folded == ("act",)


def test_unknown_model_and_option() -> None:
    with pytest.raises(ModelError, match="did you mean 'resnet18'"):
        build_model("resnet19", (3, 32, 32), 10)
    with pytest.raises(ModelError, match="no option 'depth'.*hidden"):
        build_model("mlp", (1, 8, 8), 10, {"depth": 3})
    assert len(layer_specs(build_model("mlp", (1, 8, 8), 10, {"hidden": [32]}), (1, 8, 8))) == 2


@pytest.mark.parametrize(
    "name, shape",
    [
        ("mlp", (1, 8, 8)),
        ("lenet5", (1, 28, 28)),
        ("cnn2", (3, 32, 32)),
        ("resnet18", (3, 32, 32)),
        ("mobilenet_v2", (1, 8, 8)),
        ("squeezenet1_1", (3, 32, 32)),
        ("googlenet", (3, 32, 32)),
        ("alexnet", (1, 8, 8)),
    ],
)
def test_onnx_round_trip_gives_the_same_layers(name: str, shape, tmp_path: Path) -> None:
    model = build_model(name, shape, 10)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    path = tmp_path / f"{name}.onnx"
    export_onnx(model, shape, path)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # untouched
    torch_specs = layer_specs(model, shape)
    onnx_specs = onnx_layer_specs(path)
    assert [s.param_bytes for s in onnx_specs] == [s.param_bytes for s in torch_specs]
    assert [s.name for s in onnx_specs] == [s.name for s in torch_specs]
    assert not list(tmp_path.glob(".*.tmp"))  # atomic: no temporary file left


def test_bad_onnx_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        onnx_layer_specs(bad)
