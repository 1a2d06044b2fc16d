"""``edgetrain models``: list, show and export, driven through the Typer sub-app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgetrain.cli import models_cmd
from edgetrain.errors import EdgetrainError, ModelError
from edgetrain.models import MODEL_NAMES
from tests.helpers.vision import needs_torchvision

runner = CliRunner()


def _invoke(*args: str):
    return runner.invoke(models_cmd.app, list(args))


def _json(*args: str) -> dict:
    result = _invoke(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_parse_shape() -> None:
    assert models_cmd.parse_shape("3x32x32") == (3, 32, 32)
    assert models_cmd.parse_shape("28x28") == (1, 28, 28)
    assert models_cmd.parse_shape("1X8X8") == (1, 8, 8)
    assert models_cmd.parse_shape("3x32") == (1, 3, 32)  # HxW: one channel, 3 rows, 32 columns
    for bad in ("3xbigx2", "", "32", "0x8x8", "1x2x3x4", "-1x8x8"):
        with pytest.raises(EdgetrainError, match="expected CxHxW like 3x32x32"):
            models_cmd.parse_shape(bad)
    with pytest.raises(EdgetrainError) as info:
        models_cmd.parse_shape("3x32x")
    assert str(info.value) == "--input '3x32x': expected CxHxW like 3x32x32"


def test_list() -> None:
    data = _json("list")
    assert [m["name"] for m in data["models"]] == list(MODEL_NAMES)
    by_name = {m["name"]: m for m in data["models"]}
    assert by_name["resnet18"]["params"] == 11_181_642  # at 3x32x32, 10 classes
    assert by_name["alexnet"]["min_side"] == 63 and by_name["mlp"]["min_side"] is None
    assert all(m["description"] for m in data["models"])
    result = _invoke("list")
    assert result.exit_code == 0
    assert "googlenet" in result.stdout and "11,181,642" in result.stdout


def test_show_zoo_model() -> None:
    data = _json("show", "mlp", "--input", "8x8", "--classes", "3")
    assert data["model"] == "mlp" and data["input"] == [1, 8, 8]
    assert [layer["name"] for layer in data["layers"]] == ["1", "3", "5"]
    assert data["layers"][0]["param_shapes"] == [[128, 64], [128]]
    assert data["total_params"] == 64 * 128 + 128 + 128 * 64 + 64 + 64 * 3 + 3
    assert data["total_bytes"] == 4 * data["total_params"]


@needs_torchvision
def test_show_torchvision_model() -> None:
    result = _invoke("show", "resnet18")
    assert result.exit_code == 0
    assert "41 layers" in result.stdout and "layer4.1.bn2" in result.stdout


def test_export_then_show_the_onnx_file(tmp_path: Path) -> None:
    path = tmp_path / "cnn2.onnx"
    result = _invoke("export", "cnn2", "--input", "1x28x28", "--onnx", str(path))
    assert result.exit_code == 0, result.output
    assert str(path) in result.stdout and "4 layers" in result.stdout
    assert path.is_file() and not list(tmp_path.glob(".*.tmp"))
    from_onnx = _json("show", str(path))
    from_torch = _json("show", "cnn2", "--input", "1x28x28")
    assert from_onnx["input"] == [1, 28, 28]
    assert from_onnx["total_bytes"] == from_torch["total_bytes"]
    strip = ("name", "params", "param_bytes", "num_params")
    assert [{k: layer[k] for k in strip} for layer in from_onnx["layers"]] == [
        {k: layer[k] for k in strip} for layer in from_torch["layers"]
    ]
    data = _json("export", "mlp", "--input", "8x8", "--onnx", str(tmp_path / "m.onnx"))
    assert data["layers"] == 3 and data["path"] == str(tmp_path / "m.onnx")


def test_errors_are_edgetrain_errors(tmp_path: Path) -> None:
    result = _invoke("show", "resnet19")
    assert isinstance(result.exception, ModelError)
    assert "did you mean 'resnet18'" in str(result.exception)
    result = _invoke("show", "mlp", "--input", "3x32x")
    assert isinstance(result.exception, EdgetrainError)
    assert str(result.exception) == "--input '3x32x': expected CxHxW like 3x32x32"
    result = _invoke("show", str(tmp_path / "missing.onnx"))
    assert isinstance(result.exception, ModelError) and "not found" in str(result.exception)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"junk")
    result = _invoke("show", str(bad))
    assert isinstance(result.exception, ModelError)
    assert "not a valid ONNX model" in str(result.exception)
    result = _invoke("export", "mlp", "--onnx", str(tmp_path / "no" / "such" / "m.onnx"))
    assert isinstance(result.exception, EdgetrainError)
    assert "does not exist" in str(result.exception)
    result = _invoke("show", "mlp", "--classes", "1")
    assert result.exit_code == 2  # Typer's own usage error


def test_list_and_env_import_what_they_need_only() -> None:
    """Issue 30: `models list` builds no model and imports no torch (a static table); `env`
    reads torchvision's version without importing it (that import pulls in torch._dynamo)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from edgetrain.cli.app import main\n"
        "for argv in (['models', 'list'], ['env']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exc:\n"
        "        assert not exc.code, exc.code\n"
        "    if argv[0] == 'models':\n"
        "        assert 'torch' not in sys.modules, 'models list imported torch'\n"
        "assert 'torchvision' not in sys.modules, 'env imported torchvision'\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr


@needs_torchvision
def test_env_reports_torchvisions_own_version() -> None:
    import torchvision

    from edgetrain.envinfo import torchvision_version

    assert torchvision_version() == torchvision.__version__


VISION_LINE = (
    "model 'resnet18' needs torchvision, which is not installed; pip install 'edgetrain[vision]'"
    " (or scripts/setup with a torch spec that includes torchvision)"
)


def test_without_torchvision_its_models_are_listed_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30: torchvision is optional. Without it `models list` still lists its models,
    marked as needing it, and says how to install it; asking for one is one line."""
    from edgetrain.models import catalog, zoo

    monkeypatch.setattr(catalog, "torchvision_installed", lambda: False)
    monkeypatch.setattr(zoo, "torchvision_installed", lambda: False)
    data = _json("list")
    assert data["torchvision_installed"] is False
    by_name = {m["name"]: m for m in data["models"]}
    assert by_name["resnet18"]["needs_torchvision"] and not by_name["resnet18"]["available"]
    assert not by_name["lenet5"]["needs_torchvision"] and by_name["lenet5"]["available"]
    assert [m["name"] for m in data["models"] if m["needs_torchvision"]] == list(MODEL_NAMES[3:])
    text = _invoke("list")
    assert text.exit_code == 0
    assert "its models cannot be built: pip install 'edgetrain[vision]'" in text.stdout
    result = _invoke("show", "resnet18")
    assert isinstance(result.exception, ModelError) and str(result.exception) == VISION_LINE
    assert _json("show", "lenet5", "--input", "1x28x28")["total_params"] == 61706


def test_a_torchvision_model_without_torchvision_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """The same through the real entry point, with torchvision made unimportable (as where it
    is not installed): `models show` and a recipe's check each give one line, exit 2."""
    import subprocess
    import sys

    recipe = tmp_path / "r.toml"
    recipe.write_text("[model]\nname = 'resnet18'\n[[workers]]\n")
    code = (
        "import sys\n"
        "sys.modules['torchvision'] = None  # as if not installed\n"
        "from edgetrain.cli.app import main\n"
        "main(sys.argv[1:])\n"
    )
    for argv in (["models", "show", "resnet18"], ["check", str(recipe)]):
        done = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert VISION_LINE in done.stderr, done.stderr
