"""The model zoo, ordered layer specs for scheduling, and ONNX export/import."""

from edgetrain.models.layers import LayerSpec, layer_specs, model_summary
from edgetrain.models.onnx_io import export_onnx, onnx_layer_specs
from edgetrain.models.zoo import DESCRIPTIONS, MODEL_NAMES, build_model, check_model_config

__all__ = [
    "DESCRIPTIONS",
    "MODEL_NAMES",
    "LayerSpec",
    "build_model",
    "check_model_config",
    "export_onnx",
    "layer_specs",
    "model_summary",
    "onnx_layer_specs",
]
