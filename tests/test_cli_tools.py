"""The reporting commands: data inspect, models list/show/export, env, report."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.cli import run_cli
from tests.helpers.vision import needs_torchvision

REPO = Path(__file__).resolve().parents[1]


def test_data_inspect_recipe_text_and_json(capsys) -> None:
    code, out, _ = run_cli(capsys, "data", "inspect", str(REPO / "recipes" / "quickstart.toml"))
    assert code == 0 and "digits" in out and "1437 train" in out
    code, out, _ = run_cli(
        capsys,
        "data",
        "inspect",
        "--workers",
        "3",
        "--partition",
        "dirichlet",
        "--alpha",
        "0.2",
        "--format",
        "json",
    )
    data = json.loads(out)
    assert code == 0 and len(data["parts"]) == 3 and data["alpha"] == 0.2
    assert sum(p["size"] for p in data["parts"]) == data["train"]


def test_data_inspect_real_mnist(capsys, test_data_dir: Path) -> None:
    code, out, _ = run_cli(
        capsys,
        "data",
        "inspect",
        "--dataset",
        "mnist",
        "--root",
        str(test_data_dir / "mnist-test"),
        "--workers",
        "2",
        "-f",
        "json",
    )
    data = json.loads(out)
    assert code == 0 and data["input_shape"] == [1, 28, 28] and data["train"] == 8000


def test_data_inspect_bad_input_is_one_line(capsys, tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "data", "inspect", "--partition", "random")
    assert code == 2 and err.count("\n") == 1 and "partition" in err
    code, _, err = run_cli(capsys, "data", "inspect", "--dataset", "mnist", "--root", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "no mnist IDX files" in err


def test_models_list_show_export(capsys, tmp_path: Path) -> None:
    code, out, _ = run_cli(capsys, "models", "list", "--format", "json")
    names = [m["name"] for m in json.loads(out)["models"]]
    assert code == 0 and "resnet152" in names and "cnn2" in names
    code, out, _ = run_cli(capsys, "models", "show", "lenet5", "--input", "1x28x28", "-f", "json")
    shown = json.loads(out)
    assert code == 0 and len(shown["layers"]) == 5 and shown["total_params"] == 61706
    onnx_path = tmp_path / "lenet5.onnx"
    code, out, _ = run_cli(
        capsys, "models", "export", "lenet5", "--input", "1x28x28", "--onnx", str(onnx_path)
    )
    assert code == 0 and onnx_path.is_file()
    code, out, _ = run_cli(capsys, "models", "show", str(onnx_path), "-f", "json")
    back = json.loads(out)
    assert [x["param_bytes"] for x in back["layers"]] == [x["param_bytes"] for x in shown["layers"]]


@needs_torchvision
def test_models_show_torchvision_model(capsys) -> None:
    code, out, _ = run_cli(capsys, "models", "show", "resnet18")
    assert code == 0 and "layer4.1.bn2" in out


def test_models_bad_input(capsys) -> None:
    code, _, err = run_cli(capsys, "models", "show", "resnet19")
    assert code == 2 and "unknown model 'resnet19'" in err and err.count("\n") == 1
    code, _, err = run_cli(capsys, "models", "show", "mlp", "--input", "3x32")
    assert code == 0 or (code == 2 and "--input" in err)
    code, _, err = run_cli(capsys, "models", "show", "mlp", "--input", "3xbig")
    assert code == 2 and "expected CxHxW" in err
    code, _, err = run_cli(capsys, "models", "show", "missing.onnx")
    assert code == 2 and "not found" in err


def test_report_on_a_missing_run(capsys, tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "report", str(tmp_path))
    assert code == 2 and "not an edgetrain run directory" in err
