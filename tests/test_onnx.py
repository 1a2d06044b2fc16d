"""ONNX export of zoo models, and layer specs read back from ONNX graphs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from edgetrain.errors import ModelError
from edgetrain.models import build_model, export_onnx, layer_specs, onnx_layer_specs
from edgetrain.models.zoo import SlicedAdaptiveAvgPool2d
from tests.helpers.vision import model_params, needs_torchvision

# torch module class -> ONNX op the legacy exporter emits for it
_ONNX_KIND = {"Conv2d": "Conv", "BatchNorm2d": "BatchNormalization", "Linear": "Gemm"}


@pytest.mark.parametrize(
    "name, shape",
    model_params(
        [
            ("mlp", (1, 8, 8)),
            ("lenet5", (1, 8, 8)),
            ("cnn2", (3, 32, 32)),
            ("resnet18", (3, 32, 32)),
            ("mobilenet_v2", (1, 8, 8)),
            ("squeezenet1_1", (3, 32, 32)),
            ("googlenet", (1, 8, 8)),
        ]
    ),
)
def test_round_trip_gives_the_same_layers(name: str, shape, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = build_model(name, shape, 10)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    path = tmp_path / f"{name}.onnx"
    export_onnx(model, shape, path)
    assert model.training  # mode restored
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # untouched
    assert not list(tmp_path.glob(".*.tmp"))  # atomic: no temporary file left

    torch_specs = layer_specs(model, shape)
    onnx_specs = onnx_layer_specs(path)
    assert len(onnx_specs) == len(torch_specs)
    for t, o in zip(torch_specs, onnx_specs, strict=True):
        assert (o.name, o.params, o.param_shapes) == (t.name, t.params, t.param_shapes)
        assert (o.param_bytes, o.num_params) == (t.param_bytes, t.num_params)
        assert o.kind == _ONNX_KIND.get(t.kind, o.kind)


@needs_torchvision
def test_batchnorm_is_not_folded_into_the_convolution(tmp_path: Path) -> None:
    model = build_model("resnet18", (3, 32, 32), 10)
    path = tmp_path / "r.onnx"
    export_onnx(model, (3, 32, 32), path)
    graph = onnx.load(str(path)).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("BatchNormalization") == 20 and ops.count("Conv") == 20
    inits = {t.name for t in graph.initializer}
    assert {"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "fc.weight"} <= inits
    assert not any(n.startswith("onnx::") for n in inits)


def test_failed_export_is_one_model_error_and_leaves_no_file(tmp_path: Path) -> None:
    # Adaptive pooling from 2x2 to 3x3 has no ONNX form in the legacy exporter.
    model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.AdaptiveAvgPool2d(3), nn.Flatten())
    path = tmp_path / "bad.onnx"
    with pytest.raises(ModelError, match="cannot export .* to ONNX: .*adaptive_avg_pool2d"):
        export_onnx(model, (1, 2, 2), path)
    assert list(tmp_path.iterdir()) == []


def test_sliced_adaptive_pooling_exports(tmp_path: Path) -> None:
    """VGG and AlexNet at inputs whose feature map does not divide 7 (6) still export."""
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        SlicedAdaptiveAvgPool2d((3, 2), (7, 6)),
        nn.Flatten(),
        nn.Linear(4 * 7 * 6, 5),
    )
    path = tmp_path / "pool.onnx"
    export_onnx(model, (1, 3, 2), path)
    specs = onnx_layer_specs(path)
    assert [s.name for s in specs] == ["0", "3"]
    assert [s.param_bytes for s in specs] == [s.param_bytes for s in layer_specs(model, (1, 3, 2))]


def test_bad_and_missing_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        onnx_layer_specs(bad)
    with pytest.raises(ModelError, match="not found"):
        onnx_layer_specs(tmp_path / "missing.onnx")
    empty = tmp_path / "empty.onnx"
    onnx.save(helper.make_model(helper.make_graph([], "g", [], [])), str(empty))
    with pytest.raises(ModelError, match="not a valid ONNX model: its graph has no nodes"):
        onnx_layer_specs(empty)


def _init(name: str, shape: tuple[int, ...], dtype: type = np.float32) -> TensorProto:
    return numpy_helper.from_array(np.zeros(shape, dtype=dtype), name)


def test_any_graph_shape_constants_buffers_and_shared_weights(tmp_path: Path) -> None:
    """A hand-written graph: what counts as a parameter, naming, folding, sharing."""
    inits = [
        _init("scales", (4,)),  # Resize scales: float, but not a parameter
        _init("conv.weight", (2, 3, 3, 3)),
        _init("conv.bias", (2,)),
        _init("bn.weight", (2,)),
        _init("bn.bias", (2,)),
        _init("bn.running_mean", (2,)),  # buffers
        _init("bn.running_var", (2,)),
        _init("shape_c", (2,), np.int64),  # shape constant: not float
        _init("W_shared", (8, 4), np.float16),  # not a state-dict name; used twice
        _init("alpha", ()),  # scalar: rank 0
    ]
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["r"], name="resize"),
        helper.make_node("Conv", ["r", "conv.weight", "conv.bias"], ["c"], name="conv_node"),
        helper.make_node(
            "BatchNormalization",
            ["c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
            ["b"],
            name="bn_node",
        ),
        helper.make_node("Relu", ["b"], ["a"], name="relu"),
        helper.make_node("Reshape", ["a", "shape_c"], ["f"]),  # no name
        helper.make_node("MatMul", ["f", "W_shared"], ["m1"], name="mm1"),
        helper.make_node("Mul", ["m1", "alpha"], ["s"], name="mul"),
        helper.make_node("MatMul", ["s", "W_shared"], ["m2"], name="mm2"),
        helper.make_node("Softmax", ["m2"], ["y"], name="softmax"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    path = tmp_path / "hand.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits)), str(path))

    specs = onnx_layer_specs(path)
    assert [(s.name, s.kind) for s in specs] == [
        ("conv", "Conv"),
        ("bn", "BatchNormalization"),
        ("mm1", "MatMul"),
    ]
    conv, bn, mm = specs
    assert conv.params == ("conv.weight", "conv.bias") and conv.folded == ("resize",)
    assert conv.param_bytes == (54 + 2) * 4 and conv.num_params == 56
    assert bn.params == ("bn.weight", "bn.bias") and bn.param_bytes == 16
    assert mm.params == ("W_shared",) and mm.param_shapes == ((8, 4),)
    assert mm.param_bytes == 32 * 2  # float16
    assert mm.folded == ("relu", "Reshape_4", "mul", "mm2", "softmax")
