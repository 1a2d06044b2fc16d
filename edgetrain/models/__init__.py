"""The model zoo, ordered layer specs for scheduling, and ONNX export/import.

The zoo's names, descriptions and listed parameter counts (:mod:`edgetrain.models.catalog`)
load without torch; everything else is imported on first use (PEP 562), so that listing the
zoo or validating a recipe does not pay torch's import."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from edgetrain.models.catalog import DESCRIPTIONS, MIN_SIDE, MODEL_NAMES

if TYPE_CHECKING:
    from edgetrain.models.layers import LayerSpec, layer_specs, model_summary
    from edgetrain.models.onnx_io import export_onnx, onnx_layer_specs
    from edgetrain.models.zoo import build_model, check_model_config, count_parameters

_LAZY: dict[str, str] = {
    "LayerSpec": "edgetrain.models.layers",
    "layer_specs": "edgetrain.models.layers",
    "model_summary": "edgetrain.models.layers",
    "export_onnx": "edgetrain.models.onnx_io",
    "onnx_layer_specs": "edgetrain.models.onnx_io",
    "build_model": "edgetrain.models.zoo",
    "check_model_config": "edgetrain.models.zoo",
    "count_parameters": "edgetrain.models.zoo",
}


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` on first use (and keep it here)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "DESCRIPTIONS",
    "MIN_SIDE",
    "MODEL_NAMES",
    "LayerSpec",
    "build_model",
    "check_model_config",
    "count_parameters",
    "export_onnx",
    "layer_specs",
    "model_summary",
    "onnx_layer_specs",
]
