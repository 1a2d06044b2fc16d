"""``RUN/model/final.safetensors`` (issue 30), without a launch: written from a hand-in's float
weights, it holds the model's whole state dict (a strict load takes it, BatchNorm's counters
included), its metadata builds the model again, and a missing safetensors package costs the
file, not the run. Real runs of each family load it in test_gossip_run, test_ps_run and
test_pipeline_run."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from edgetrain.models import build_model
from edgetrain.recipe import parse_recipe
from edgetrain.runtime.model_file import FINAL_MODEL, model_bytes, write_final_model
from edgetrain.runtime.setup import build_run_model, load_run_data
from edgetrain.runtime.weights import float_state

pytest.importorskip("safetensors")

from safetensors import safe_open  # noqa: E402
from safetensors.torch import load, load_file  # noqa: E402

RECIPE = {
    "run": {"seed": 3},
    "model": {"name": "mlp", "options": {"hidden": [32]}},
    "workers": [{"count": 2}],
}


def test_the_file_loads_strictly_into_a_model_built_from_its_metadata(tmp_path: Path) -> None:
    recipe = parse_recipe(RECIPE)
    data = load_run_data(recipe)
    trained = build_run_model(recipe, data)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.5)  # weights no fresh model has
    weights = {k: v.numpy().copy() for k, v in float_state(trained).items()}
    info = write_final_model(recipe, data, weights, tmp_path)
    path = tmp_path / FINAL_MODEL
    assert info == {
        "model_file": "model/final.safetensors",
        "model_file_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    with safe_open(str(path), "pt") as fh:
        meta = fh.metadata()
    assert (meta["model"], meta["family"], meta["technique"]) == ("mlp", "gossip", "gosgd")
    model = build_model(
        meta["model"],
        tuple(json.loads(meta["input_shape"])),
        int(meta["classes"]),
        json.loads(meta["options"]),
    )
    model.load_state_dict(load_file(str(path)), strict=True)
    x = torch.from_numpy(data.x_test[:16])
    assert torch.equal(model(x), trained(x))
    assert not list(path.parent.glob(".*tmp"))  # written whole, through a temporary file


def test_batchnorm_counters_are_in_the_file(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    model.train()
    model(torch.randn(8, 4))  # running statistics and the batch counter move
    tensors = load(model_bytes(model, {"model": "test"}))
    assert tensors["1.num_batches_tracked"].dtype == torch.int64
    fresh = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    fresh.load_state_dict(tensors, strict=True)
    assert torch.equal(fresh[1].running_mean, model[1].running_mean)


def test_without_safetensors_the_run_keeps_its_result_but_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "safetensors", None)  # an install from before the dependency
    recipe = parse_recipe(RECIPE)
    data = load_run_data(recipe)
    weights = {k: v.numpy() for k, v in float_state(build_run_model(recipe, data)).items()}
    assert write_final_model(recipe, data, weights, tmp_path) == {"model_file": None}
    assert list(tmp_path.iterdir()) == []
