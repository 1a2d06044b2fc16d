"""The run's final model file, ``RUN/model/final.safetensors``, loaded as a user would: the
recipe's model built afresh (other random weights), the file's tensors loaded with a strict
``load_state_dict``, and evaluated on the test split: it scores the run's reported accuracy."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import torch

from edgetrain.models import build_model
from edgetrain.recipe import load_recipe
from edgetrain.rundir import read_jsonl
from edgetrain.runtime.setup import load_run_data
from edgetrain.runtime.trainer import evaluate


def assert_final_model(run: Path, summary: dict[str, Any]) -> None:
    """``run``'s final.safetensors is the model whose accuracy ``summary`` reports."""
    from safetensors.torch import load_file

    path = run / "model" / "final.safetensors"
    recipe, _ = load_recipe(run / "recipe.toml")
    data = load_run_data(recipe)
    torch.manual_seed(recipe.run.seed + 1000)  # not the run's initial weights
    model = build_model(recipe.model.name, data.input_shape, data.classes, recipe.model.options)
    model.load_state_dict(load_file(str(path)), strict=True)
    with torch.no_grad():
        acc, loss = evaluate(model, torch.from_numpy(data.x_test), torch.from_numpy(data.y_test))
    assert acc == summary["test_accuracy"]
    events = read_jsonl(run / "metrics" / "coordinator.jsonl")
    final = next(e for e in reversed(events) if e["event"] in ("averaged", "final_model"))
    assert loss == pytest.approx(final["test_loss"], rel=1e-5)
    assert final["model_file"] == "model/final.safetensors"
    assert final["model_file_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
