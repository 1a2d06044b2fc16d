"""The pipeline family from the command line: ``edgetrain plan --pipeline --profile ...
--stages N`` writes the partition to ``RUN/plans/`` and ``launch --run-dir RUN`` trains with
its cuts; a plan that cannot be read, or was made for another model, and a model that is not a
chain are refused in one line before anything is written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import last_error, run_cli
from tests.helpers.launching import Launch
from tests.helpers.vision import model_params

RECIPE = """
[run]
name = "planned"
seed = 1
[data]
dataset = "digits"
[model]
name = "{model}"
[train]
family = "pipeline"
technique = "pipedream"
epochs = 1
batch_size = 16
lr = 0.05
momentum = 0
[pipeline]
{plan}[[workers]]
role = "stage"
count = 2
"""


def _recipe(tmp_path: Path, model: str = "mlp", plan: str | None = "plans/pipeline.json") -> Path:
    path = tmp_path / f"{model}-{plan is not None}.toml"
    line = f'plan = "{plan}"\n' if plan else ""
    path.write_text(RECIPE.format(model=model, plan=line))
    return path


def _launch(*argv: str, cwd: Path) -> tuple[int, str]:
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "edgetrain", "launch", *argv, "--quiet-logs"],
        capture_output=True, text=True, cwd=cwd, timeout=120,
    )  # fmt: skip
    return proc.returncode, proc.stderr


@pytest.mark.timeout(300)
def test_plan_writes_the_partition_and_launch_trains_with_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "RUN"
    code, _, err = run_cli(
        capsys, "profile", "-m", "mlp", "-i", "1x8x8", "-b", "16", "--run-dir", str(run),
        "--host-name", "h", "--repeats", "5", "--warmup", "2", "--min-time", "0.2",
    )  # fmt: skip
    assert code == 0, err  # (a one-repeat profile on a busy machine could flip the cut)
    # stage 1's host three times slower: the min-max cuts move the second layer to stage 0
    code, out, err = run_cli(
        capsys, "plan", "--pipeline", "--profile", str(run / "profiles" / "h.json"),
        "--stages", "2", "--speeds", "1,3", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    written = json.loads((run / "plans" / "pipeline.json").read_text())
    assert written == doc and doc["time_source"] == "profile"
    assert [s["unit_names"] for s in doc["stages"]] == [["1", "3"], ["5"]]
    launch = Launch(None, tmp_path / "runs", str(_recipe(tmp_path)), "--run-dir", str(run))
    try:
        code, summary = launch.finish(timeout=150)
    finally:
        launch.kill()
    assert code == 0, launch.stderr
    assert summary is not None and summary["status"] == "completed"
    # the default partitioner would cut [1 | 3, 5]; the plan's cuts ran
    stages = summary["technique_report"]["stages"]
    assert [s["units"] for s in stages] == [["1", "3"], ["5"]]
    # launch says what it read of RUN and what it left
    inputs = json.loads((run / "manifest.json").read_text())["inputs"]
    assert inputs == {
        "used": [{"path": "plans/pipeline.json", "key": "[pipeline] plan"}],
        "ignored": ["profiles/h.json"],
    }
    assert "uses from the run directory: plans/pipeline.json ([pipeline] plan)" in launch.stderr


@pytest.mark.timeout(120)
def test_plans_that_cannot_be_used_are_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "RUN"
    (run / "plans").mkdir(parents=True)
    # no such plan in the run directory
    code, err = _launch(str(_recipe(tmp_path)), "--run-dir", str(run), cwd=tmp_path)
    line = last_error(err)
    assert code == 2 and line.startswith("error: [pipeline] plan: cannot read"), err
    assert "Traceback" not in err and not (run / "manifest.json").exists()
    # a plan needs the run directory it lives in; a new one holds none
    code, err = _launch(str(_recipe(tmp_path)), "--runs-root", str(tmp_path / "runs"), cwd=tmp_path)
    assert code == 2 and "launch with --run-dir RUN" in last_error(err), err
    assert not (tmp_path / "runs").exists()
    # a plan made for another model (the recipe's MLP, but three hidden layers)
    code, _, err = run_cli(
        capsys, "plan", "--pipeline", "--recipe", str(_recipe(tmp_path, plan=None)),
        "--stages", "2", "--run-dir", str(run), "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    other = (
        _recipe(tmp_path)
        .read_text()
        .replace('name = "mlp"\n', 'name = "mlp"\noptions = {hidden = [32, 32, 32]}\n')
    )
    (tmp_path / "other.toml").write_text(other)
    code, err = _launch(str(tmp_path / "other.toml"), "--run-dir", str(run), cwd=tmp_path)
    assert code == 2 and "was made for another model" in last_error(err), err
    assert not (run / "manifest.json").exists()


@pytest.mark.parametrize("model", model_params(["googlenet", "mobilenet_v2"]))
def test_a_model_that_is_not_a_chain_is_refused_in_one_line(tmp_path: Path, model: str) -> None:
    code, err = _launch(
        str(_recipe(tmp_path, model, plan=None)), "--runs-root", str(tmp_path / "runs"),
        cwd=tmp_path,
    )  # fmt: skip
    line = last_error(err)
    assert code == 2 and "Traceback" not in err, err
    assert line.startswith(f"error: [model] model '{model}' cannot be cut into pipeline stages")
    assert "resnet18" in line and "vgg16" in line  # what is supported
    assert not (tmp_path / "runs").exists()


def test_plan_takes_each_stages_memory_cap_from_the_hosts_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(
        '[[hosts]]\naddress = "10.0.0.1"\nmemory = "64m"\n'
        '[[hosts]]\naddress = "10.0.0.2"\nmemory = 1073741824\n'
    )
    recipe = str(_recipe(tmp_path, plan=None))
    code, out, err = run_cli(
        capsys, "plan", "--pipeline", "--recipe", recipe, "--hosts", str(hosts), "--format", "json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert [s["cap_bytes"] for s in doc["stages"]] == [64 * 2**20, 2**30]
    assert doc["inputs"]["hosts"] == str(hosts)
    # a cap no cut fits under: one line naming the unit, its memory and the cap
    hosts.write_text('[[hosts]]\naddress = "a"\nmemory = "32m"\nworkers = 2\n')
    code, _, err = run_cli(
        capsys, "plan", "--pipeline", "--recipe", recipe, "--hosts", str(hosts),
        "--microbatch", "100000",
    )  # fmt: skip
    assert code == 2 and "Traceback" not in err
    assert "against a cap of 32 MiB" in last_error(err), err
    hosts.write_text('[[hosts]]\naddress = "a"\nmemory = "lots"\nworkers = 2\n')
    code, _, err = run_cli(capsys, "plan", "--pipeline", "--recipe", recipe, "--hosts", str(hosts))
    assert code == 2 and "memory 'lots' is not a size" in last_error(err), err


def test_cuda_without_cuda_is_refused_in_one_line(tmp_path: Path) -> None:
    # the stages compute on [train] device; asked for CUDA where there is none, the pipeline is
    # told so before anything starts (as every family is), instead of silently using the CPU
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: device = 'cuda' trains here (test_pipeline_cuda)")
    path = _recipe(tmp_path, plan=None)
    path.write_text(path.read_text().replace("[train]\n", '[train]\ndevice = "cuda"\n'))
    code, err = _launch(str(path), "--runs-root", str(tmp_path / "runs"), cwd=tmp_path)
    assert code == 2 and "Traceback" not in err, err
    assert last_error(err) == (
        "error: [train] device = 'cuda' but no CUDA device is available; use device = 'cpu' "
        "or 'auto'"
    )
    assert not (tmp_path / "runs").exists()
