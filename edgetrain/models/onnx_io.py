"""ONNX export of zoo models, and layer specs read back from any ONNX graph."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
from torch import nn

from edgetrain.errors import ModelError
from edgetrain.models.layers import LayerSpec, fold_trailing

# Inputs of these ops are shapes, sizes or scales, never trainable parameters.
_NON_PARAMETRIC_OPS = {
    "Resize",
    "Upsample",
    "Reshape",
    "Pad",
    "Slice",
    "Expand",
    "Tile",
    "ConstantOfShape",
    "Clip",
    "Squeeze",
    "Unsqueeze",
    "Range",
}
# For these ops only some inputs are parameters (BatchNormalization's mean/var are buffers).
_PARAM_INPUTS = {"BatchNormalization": (1, 2)}


def export_onnx(model: nn.Module, input_shape: tuple[int, int, int], path: Path) -> None:
    """Write ``model`` to ``path`` as ONNX (atomically).

    It is exported in training mode (with a batch of 2) so that BatchNorm stays its own node
    instead of being folded into the convolution before it, and parameters keep their
    state-dict names: reading the file back gives the same layers as :func:`layer_specs`.
    The model's weights and buffers are left as they were.
    """
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    saved = {k: v.clone() for k, v in model.state_dict().items()}  # tracing updates BN stats
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (torch.zeros(2, *input_shape),),
                tmp,
                dynamo=False,
                export_params=True,
                do_constant_folding=False,
                training=torch.onnx.TrainingMode.TRAINING,
                input_names=["input"],
                output_names=["logits"],
            )
        os.replace(tmp, path)
    finally:
        model.load_state_dict(saved)
        model.train(was_training)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _layer_name(param_names: list[str], node_name: str) -> str:
    first = param_names[0]
    if "." in first and not first.startswith("onnx::"):
        return first.rsplit(".", 1)[0]
    return node_name or first


def onnx_layer_specs(path: Path) -> list[LayerSpec]:
    """Parametric layers of an ONNX graph in node order, initializers grouped per node."""
    import onnx
    from onnx import helper

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - onnx raises many kinds
        raise ModelError(f"'{path}' is not a valid ONNX model: {exc}") from None
    inits = {t.name: t for t in model.graph.initializer}
    taken: set[str] = set()
    specs: list[LayerSpec] = []
    pending: list[str] = []
    for i, node in enumerate(model.graph.node):
        label = node.name or f"{node.op_type}_{i}"
        params = []
        if node.op_type not in _NON_PARAMETRIC_OPS:
            positions = _PARAM_INPUTS.get(node.op_type, range(len(node.input)))
            for pos in positions:
                if pos >= len(node.input):
                    continue
                name = node.input[pos]
                t = inits.get(name)
                if t is None or name in taken or len(t.dims) == 0:
                    continue
                dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
                if dtype.kind != "f":
                    continue
                taken.add(name)
                params.append((name, tuple(int(d) for d in t.dims), dtype.itemsize))
        if not params:
            pending.append(label)
            continue
        names = [n for n, _, _ in params]
        counts = [int(np.prod(s)) for _, s, _ in params]
        specs.append(
            LayerSpec(
                name=_layer_name(names, node.name),
                kind=node.op_type,
                params=tuple(names),
                param_shapes=tuple(s for _, s, _ in params),
                param_bytes=sum(c * b for c, (_, _, b) in zip(counts, params, strict=True)),
                num_params=sum(counts),
                folded=tuple(pending),
            )
        )
        pending = []
    fold_trailing(specs, pending)
    return specs
