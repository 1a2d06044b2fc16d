"""Profile JSON (schema version 1) through the CLI: contents, file, stdout, and bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from edgetrain.models import build_model, layer_specs
from edgetrain.profile import schema
from tests.helpers.profile_cli import run_profile

FAST = ("--repeats", "3", "--warmup", "1", "--threads", "1")


def test_profile_cli_writes_the_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["profile", "--model", "lenet5", "--input", "1x28x28", "--batch-sizes", "4,8"]
    argv += ["--run-dir", str(tmp_path), "--host-name", "dev-1", "--format", "json", *FAST]
    code, out, err = run_profile(capsys, *argv)
    assert code == 0, err
    data = json.loads(out)  # stdout holds only the JSON (progress goes to stderr)
    on_disk = json.loads((tmp_path / "profiles" / "dev-1.json").read_text())
    assert on_disk == data
    schema.validate_profile(data)
    assert data["schema_version"] == 1 and data["host"] == "dev-1"
    assert data["model"] == "lenet5" and data["input"] == [1, 28, 28]
    assert data["batch_sizes"] == [4, 8] and set(data["throughput"]) == {"4", "8"}
    for key in ("cpu_model", "cores", "memory_bytes", "torch_threads", "cuda"):
        assert key in data["device"]
    assert data["device"]["torch_threads"] == 1
    specs = layer_specs(build_model("lenet5", (1, 28, 28), 10), (1, 28, 28))
    assert [x["name"] for x in data["layers"]] == [s.name for s in specs]
    assert [x["param_bytes"] for x in data["layers"]] == [s.param_bytes for s in specs]
    # the first conv's output at batch 4: 4 x 6 x 28 x 28 float32
    assert data["layers"][0]["activation_bytes"] == 4 * 6 * 28 * 28 * 4
    for layer in data["layers"]:
        assert layer["fwd_s"] > 0 and layer["bwd_s"] > 0
    assert data["step_s"] > 0 and data["step_s_by_batch"]["4"] == data["step_s"]
    assert math.isclose(data["throughput"]["4"], 4 / data["step_s"])
    assert data["layer_sum_ratio"] == pytest.approx(data["layer_sum_s"] / data["step_s"])
    assert data["peak_memory_bytes"] > 0 and data["compute_source"] == "measured"
    assert data["links"] == []


def test_text_output_shows_the_ratio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["profile", "--model", "mlp", "--input", "1x8x8", "--batch-sizes", "4", *FAST]
    code, out, err = run_profile(capsys, *argv)
    assert code == 0, err
    assert "x step_s" in out and "throughput" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "resnet17"], "unknown model 'resnet17'"),
        (["--model", "mlp", "--input", "3x"], "--input '3x'"),
        (["--model", "mlp", "--batch-sizes", "8,0"], "--batch-sizes '8,0'"),
        (["--model", "mlp", "--batch-sizes", "a"], "--batch-sizes 'a'"),
        (["--model", "mlp", "--model-option", "hiden=[8]"], "has no option 'hiden'"),
        (["--model", "mlp", "--model-option", "hidden"], "expected KEY=VALUE"),
        (["--model", "mlp", "--host-name", "a/b"], "host name 'a/b'"),
        (["--peer", "localhost:80"], "not an endpoint"),
        (["--peer", "tcp://127.0.0.1:9", "--probe-timeout", "0.3"], "did not answer"),
        ([], "nothing to profile"),
        (["--model", "mlp", "--contention", "--levels", "0,2"], "--levels '0,2'"),
        (["--model", "x.onnx", "--contention"], "--contention needs a model"),
        (["--model", "mlp", "--kernels", "gossip"], "--kernels 'gossip': no timer"),
        (["--model", "x.onnx", "--kernels", "pipeline"], "--kernels times a zoo model"),
        (["--model", "mlp", "--data", "mnist"], "--data mnist: dataset 'mnist' needs root"),
        (["--model", "mlp", "--data", "imagenet"], "--data imagenet: "),
        (["--model", "mlp", "--data", "digits", "--input", "1x28x28"], "its samples are 1x8x8"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    needle: str,
) -> None:
    code, out, err = run_profile(capsys, "profile", "--run-dir", str(tmp_path), *args)
    assert code == 2
    assert needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "profiles").exists()


def test_model_options_shape_the_profiled_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--model-option builds the zoo model a recipe's [model] table describes."""
    argv = ["profile", "--model", "mlp", "--input", "1x8x8", "--batch-sizes", "4", *FAST]
    argv += ["--model-option", "hidden=[32, 16]", "--format", "json"]
    code, out, err = run_profile(capsys, *argv)
    assert code == 0, err
    data = json.loads(out)
    assert data["model_options"] == {"hidden": [32, 16]}
    params = [layer["param_bytes"] for layer in data["layers"]]
    assert params == [4 * (64 * 32 + 32), 4 * (32 * 16 + 16), 4 * (16 * 10 + 10)]


def test_data_times_the_steps_on_the_datasets_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--data: the dataset's samples (its shape and classes), recorded in the profile."""
    argv = ["profile", "--model", "lenet5", "--data", "digits", "--batch-sizes", "4", *FAST]
    code, out, err = run_profile(capsys, *argv, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["input"] == [1, 8, 8] and data["timed_on"] == "data:digits"
    plain = ["profile", "--model", "mlp", "--input", "1x8x8", "--batch-sizes", "4", *FAST]
    code, out, err = run_profile(capsys, *plain, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["timed_on"] == "random"


def test_serve_subcommand_and_options_both_parse(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_profile(capsys, "profile", "serve", "--help")
    assert code == 0 and "--bind" in out and "--port" in out
    code, out, _ = run_profile(capsys, "profile", "--help")
    assert code == 0 and "--batch-sizes" in out and "serve" in out


def _valid() -> dict[str, object]:
    data = schema.empty_profile("h", {k: None for k in ("cpu_model", "cores", "memory_bytes")})
    data["device"].update(torch_threads=1, cuda=None)  # type: ignore[attr-defined]
    return data


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"schema_version": 2}, "schema_version"),
        ({"layers": [{"name": "a", "param_bytes": 1}]}, "layers[0]"),
        ({"links": [{"peer": "p", "bandwidth_Bps": "fast", "rtt_s": 0.1, "dt_s": 0}]}, "links[0]"),
        ({"throughput": {"eight": 1.0}}, "throughput"),
        ({"compute_source": "guess"}, "compute_source"),
        ({"step_s": True}, "step_s"),
    ],
)
def test_schema_rejects(change: dict[str, object], needle: str) -> None:
    schema.validate_profile(_valid())
    data = {**_valid(), **change}
    with pytest.raises(schema.ProfileError, match=needle.replace("[", r"\[")):
        schema.validate_profile(data)


def test_kernels_pipeline_times_a_local_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--kernels pipeline adds the pipeline's own step (a Local stage) at the first batch size,
    which the family's cost model scales the layers to."""
    from edgetrain.runtime.setting_build import sustained_scale

    argv = ["profile", "--model", "mlp", "--input", "1x8x8", "--batch-sizes", "4,8", *FAST]
    argv += ["--model-option", "hidden=[32, 16]", "--kernels", "pipeline", "--format", "json"]
    code, out, err = run_profile(capsys, *argv)
    assert code == 0, err
    data = json.loads(out)
    kern = data["kernels"]["pipeline"]
    assert kern["batch"] == 4 and kern["units"] == 3 and kern["runs"] >= 1
    assert kern["step_s"] > 0 and kern["sustained_step_s"] >= kern["step_s"]
    # no quota here: the sustained step is the faster half's
    want = kern["sustained_step_s"] / data["layer_sum_s"]
    assert sustained_scale(data, "pipeline") == pytest.approx(want)
