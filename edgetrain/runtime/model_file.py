"""The run's final model as a file: ``RUN/model/final.safetensors``, the whole state dict of the
recipe's model holding the final weights (BatchNorm's counters included, so a strict
``load_state_dict`` takes it), in the safetensors format: plain tensors, nothing to unpickle.

Its metadata names what builds the model (``model``, ``options``, ``input_shape``, ``classes``)
and the run (``family``, ``technique``); docs/launch.md shows the lines that load it in plain
PyTorch. The file is written whole or not at all; its SHA-256 goes into the final model's event.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgetrain.recipe import Recipe
from edgetrain.rundir import atomic_write_bytes

if TYPE_CHECKING:
    from torch import nn

    from edgetrain.data import Dataset

log = logging.getLogger(__name__)

FINAL_MODEL = "model/final.safetensors"


def model_bytes(model: nn.Module, metadata: Mapping[str, str]) -> bytes:
    """``model``'s state dict as safetensors bytes (each tensor its own contiguous copy)."""
    from safetensors.torch import save

    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    return save(tensors, metadata=dict(metadata))


def final_metadata(recipe: Recipe, data: Dataset) -> dict[str, str]:
    """What builds the model again: ``build_model(model, input_shape, classes, options)``."""
    return {
        "format": "pt",
        "model": recipe.model.name,
        "options": json.dumps(recipe.model.options, sort_keys=True),
        "input_shape": json.dumps(list(data.input_shape)),
        "classes": str(data.classes),
        "family": recipe.train.family,
        "technique": recipe.train.technique,
    }


def write_final_model(
    recipe: Recipe, data: Dataset, weights: Mapping[str, np.ndarray], run_dir: Path
) -> dict[str, Any]:
    """Write ``RUN/model/final.safetensors``: the recipe's model holding ``weights`` (loaded as
    the launcher evaluates them). Returns ``model_file`` and ``model_file_sha256`` for the final
    model's event; without the safetensors package (an install from before it was a
    dependency) the run still completes, with a warning and no file."""
    import torch

    from edgetrain.runtime.setup import build_run_model

    if importlib.util.find_spec("safetensors") is None:
        log.warning("no %s: the safetensors package is missing (pip install -e .)", FINAL_MODEL)
        return {"model_file": None}
    model = build_run_model(recipe, data)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=False)
    blob = model_bytes(model, final_metadata(recipe, data))
    atomic_write_bytes(run_dir / FINAL_MODEL, blob)
    return {"model_file": FINAL_MODEL, "model_file_sha256": hashlib.sha256(blob).hexdigest()}
