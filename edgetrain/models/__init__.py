"""The model zoo, ordered layer specs for scheduling, and ONNX export/import."""

from edgetrain.models.layers import LayerSpec, layer_specs, model_summary
from edgetrain.models.onnx_io import export_onnx, onnx_layer_specs
from edgetrain.models.zoo import (
    DESCRIPTIONS,
    MIN_SIDE,
    MODEL_NAMES,
    build_model,
    check_model_config,
    count_parameters,
)

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
