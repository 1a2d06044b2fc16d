"""ONNX import for profiling: an exported torchvision model's layers, FLOPs and estimated costs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgetrain.models import build_model, export_onnx, layer_specs
from edgetrain.profile.compute import ComputeConfig
from edgetrain.profile.onnx_costs import graph_input_shape, layer_costs, profile_onnx
from tests.helpers.profile_cli import run_profile
from tests.helpers.vision import needs_torchvision

SHAPE = (3, 32, 32)
pytestmark = needs_torchvision  # every test reads an exported resnet18


@pytest.fixture(scope="module")
def resnet18_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("onnx") / "resnet18.onnx"
    export_onnx(build_model("resnet18", SHAPE, 10), SHAPE, path)
    return path


def test_layers_and_flops_of_exported_resnet18(resnet18_onnx: Path) -> None:
    specs, flops, acts, batch = layer_costs(resnet18_onnx)
    torch_specs = layer_specs(build_model("resnet18", SHAPE, 10), SHAPE)
    assert [(s.name, s.param_bytes) for s in specs] == [
        (s.name, s.param_bytes) for s in torch_specs
    ]
    assert batch == 2 and graph_input_shape(resnet18_onnx) == list(SHAPE)
    # conv1: 64 filters of 3x7x7, stride 2 -> 16x16 outputs, batch 2, 2 FLOPs per MAC
    assert flops[0] == 2 * 2 * 64 * 16 * 16 * 3 * 7 * 7
    assert acts[0] == 2 * 64 * 16 * 16 * 4
    # fc: 512 -> 10 at batch 2 (its folded pooling and flatten add their element counts)
    assert flops[-1] >= 2 * 2 * 10 * 512
    assert acts[-1] == 2 * 10 * 4
    assert 1.3e8 < sum(flops) < 1.6e8  # ~37 M multiply-adds per 32x32 sample, batch 2


def test_flops_estimate_when_no_torch_model(resnet18_onnx: Path) -> None:
    cfg = ComputeConfig(batch_sizes=(4, 8))
    data = profile_onnx(resnet18_onnx, cfg, None, 10)
    assert data["compute_source"] == "flops_estimate" and data["flop_rate"] > 0
    assert data["step_s"] == pytest.approx(sum(x["fwd_s"] + x["bwd_s"] for x in data["layers"]))
    assert data["throughput"]["4"] == pytest.approx(data["throughput"]["8"])  # linear estimate
    assert data["layers"][0]["activation_bytes"] == 4 * 64 * 16 * 16 * 4


def test_cli_profiles_an_onnx_file(
    resnet18_onnx: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["profile", "--model", str(resnet18_onnx), "--batch-sizes", "2", "--format", "json"]
    fast = ["--repeats", "1", "--warmup", "0", "--threads", "1"]
    code, out, err = run_profile(capsys, *argv)
    assert code == 0, err
    data = json.loads(out)
    assert data["compute_source"] == "flops_estimate" and len(data["layers"]) == 41
    code, out, err = run_profile(capsys, *argv, *fast, "--torch-model", "resnet18")
    assert code == 0, err
    data = json.loads(out)
    assert data["compute_source"] == "measured" and data["torch_model"] == "resnet18"
    code, out, err = run_profile(capsys, *argv, *fast, "--torch-model", "lenet5")
    assert code == 2 and "does not match" in err
