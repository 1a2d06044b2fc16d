"""``[train] deterministic = true`` (issue 28): deterministic kernels in every worker, the cuBLAS
setting in every worker's environment; and a slow start-up (a CUDA initialisation holding the
interpreter lock) is not a lost worker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgetrain.comm.control import assign_roles
from edgetrain.comm.coordinator import MISSED_HEARTBEATS, SETUP_GRACE_S, Coordinator, silence_limit
from edgetrain.errors import EdgetrainError, RecipeError
from edgetrain.recipe import parse_recipe
from edgetrain.rundir import read_jsonl
from edgetrain.runtime import determinism
from tests.helpers.fake_worker import RUN
from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes
from tests.helpers.slow_start import HOLD_ENV, MARK

REPO = Path(__file__).resolve().parents[1]

BASE = {"workers": [{"count": 1}]}


def test_the_recipe_key_defaults_to_off() -> None:
    assert parse_recipe(BASE).train.deterministic is False
    on = parse_recipe({**BASE, "train": {"deterministic": True}})
    assert on.train.deterministic is True


def test_the_launcher_gives_every_worker_the_cublas_setting() -> None:
    assert determinism.environment(False) == {}
    assert determinism.environment(True) == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


_PROBE = """
import os, sys, torch
from edgetrain.runtime import determinism
done = determinism.apply(sys.argv[1] == "on")
print(done, torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
      torch.backends.cudnn.benchmark, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
"""


def _probe(flag: str, cublas: str | None) -> str:
    """What :func:`determinism.apply` leaves in a fresh process (torch's switches are global)."""
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    if cublas is not None:
        env["CUBLAS_WORKSPACE_CONFIG"] = cublas
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, flag],
        capture_output=True, text=True, timeout=120, env=env, check=True,
    )  # fmt: skip
    return out.stdout.strip()


@pytest.mark.timeout(300)
def test_apply_switches_torch_to_deterministic_kernels() -> None:
    assert _probe("on", None) == "True True True False :4096:8"
    assert _probe("on", ":16:8") == "True True True False :16:8"  # the other exact setting
    assert _probe("on", ":0:0") == "True True True False :4096:8"  # not a deterministic one
    assert _probe("off", None).startswith("False False False")  # left as torch starts


def test_an_operation_without_a_deterministic_kernel_is_named_in_one_line() -> None:
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:  # put_ has no deterministic kernel on any device (on CUDA: AdaptiveAvgPool2d's backward)
        torch.zeros(4).put_(torch.tensor([0]), torch.tensor([1.0]))
    except RuntimeError as exc:
        raised: BaseException = exc
    finally:
        torch.use_deterministic_algorithms(before)
    explained = determinism.explain(raised)
    assert isinstance(explained, EdgetrainError) and explained.exit_code == 2
    assert str(explained) == (
        "[train] deterministic = true: the model uses put_, which has no deterministic kernel "
        "on this device; set deterministic = false (weights may then differ run to run), or use "
        "a model without that layer"
    )
    other = RuntimeError("CUDA out of memory")
    assert determinism.explain(other) is other


def test_a_worker_setting_up_may_be_silent_for_the_grace_not_three_heartbeats() -> None:
    assert silence_limit("registered", 1.0) == SETUP_GRACE_S
    assert silence_limit("running", 1.0) == MISSED_HEARTBEATS * 1.0
    assert silence_limit("ready", 2.0) == MISSED_HEARTBEATS * 2.0
    assert silence_limit("registered", 60.0) == MISSED_HEARTBEATS * 60.0  # never shorter
    coord = Coordinator(RUN, {}, assign_roles(["trainer"] * 3), heartbeat_s=1.0)
    try:
        now = time.monotonic()
        for i, (status, silent) in enumerate(
            (("registered", 30.0), ("running", 3.5), ("registered", SETUP_GRACE_S + 1))
        ):
            coord.workers[i].status = status  # type: ignore[assignment]
            coord.workers[i].last_seen = now - silent
        failed = [e.worker for e in coord.check_heartbeats(now) if e.kind == "failed"]
        assert failed == [1, 2]  # setting up for 30 s is not lost; running 3.5 s silent is
    finally:
        coord.close()


SLOW = """
[run]
name = "slow"
seed = 1
heartbeat_s = 1.0
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "pipeline"
technique = "local"
epochs = 1
batch_size = 16
lr = 0.05
deterministic = true
[pipeline]
microbatches = 20
[[workers]]
role = "stage"
count = 1
"""


@pytest.mark.timeout(240)
def test_a_start_up_longer_than_the_heartbeat_timeout_is_not_a_lost_worker(
    tmp_path: Path,
) -> None:
    hold = 5  # seconds with the interpreter lock held, against a limit of 3 x 1 s
    recipe = tmp_path / "slow.toml"
    recipe.write_text(SLOW)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **os.environ,
        "EDGETRAIN_PLUGINS": "tests.helpers.slow_start",
        HOLD_ENV: str(hold),
        "PYTHONPATH": path,
    }
    env.pop("CUBLAS_WORKSPACE_CONFIG", None)
    launch = Launch(recipe, tmp_path / "runs", env=env)
    try:
        code, summary = launch.finish(timeout=200)
        run_id = launch.manifest()["run_id"]
    finally:
        launch.kill()
    assert code == 0, launch.stderr
    assert summary is not None and summary["status"] == "completed", summary
    assert not [r for r in launch.rows if r.get("event") == "failed"]
    log = (launch.run_dir / "logs" / "worker-0.log").read_text()
    # the hold happened, and the launcher had put the cuBLAS setting in the worker's environment
    assert f"{MARK} holding the interpreter lock for {hold} s; cublas :4096:8" in log, log
    rows = read_jsonl(launch.run_dir / "metrics" / "worker-0.jsonl")
    registered = next(r["t"] for r in rows if r.get("event") == "registered")
    ready = next(r["t"] for r in rows if r.get("event") == "ready")
    assert ready - registered >= hold  # silent that long while setting up, and not lost
    assert edgetrain_processes(run_id) == {}


def test_the_small_blas_workspace_is_one_of_the_deterministic_settings() -> None:
    assert parse_recipe(BASE).train.blas_workspace == "default"
    small = parse_recipe({**BASE, "train": {"blas_workspace": "small"}})
    assert small.train.blas_workspace == "small"
    env = {"CUBLAS_WORKSPACE_CONFIG": ":16:8", "CUBLASLT_WORKSPACE_SIZE": "128"}
    assert determinism.environment(False, "small") == env
    assert determinism.environment(True, "small") == env
    assert env["CUBLAS_WORKSPACE_CONFIG"] in determinism.CUBLAS_ACCEPTED
    assert determinism.environment(True, "default") == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    with pytest.raises(RecipeError, match="blas_workspace"):
        parse_recipe({**BASE, "train": {"blas_workspace": "tiny"}})
