"""ONNX export of zoo models, and layer specs read back from any ONNX graph."""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch import nn

from edgetrain.errors import ModelError
from edgetrain.models.layers import LayerSpec, fold_trailing

# Inputs of these ops are shapes, sizes, scales or bounds, never trainable parameters.
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
_PARAM_INPUTS = {
    "BatchNormalization": (1, 2),
    "InstanceNormalization": (1, 2),
    "Dropout": (),  # ratio
}
# Bits per element of the floating-point ONNX tensor types (newer ones only where defined).
_FLOAT_BITS_BY_NAME = {
    "FLOAT": 32,
    "DOUBLE": 64,
    "FLOAT16": 16,
    "BFLOAT16": 16,
    "FLOAT8E4M3FN": 8,
    "FLOAT8E4M3FNUZ": 8,
    "FLOAT8E5M2": 8,
    "FLOAT8E5M2FNUZ": 8,
    "FLOAT8E8M0": 8,
    "FLOAT6E2M3": 6,
    "FLOAT6E3M2": 6,
    "FLOAT4E2M1": 4,
}
_STATE_DICT_NAME = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)+$")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporter: its warnings, its prints, and the IR dump that its C++ logger
    writes straight to file descriptor 1 or 2 when an export fails (the legacy exporter turns
    that logger on whatever ``verbose`` says)."""
    saved: list[tuple[int, int]] = []
    for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
        with contextlib.suppress(OSError):
            saved.append((fd, os.dup(fd)))
    try:
        with open(os.devnull, "w") as null:
            for fd, _ in saved:
                os.dup2(null.fileno(), fd)
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)


def export_onnx(model: nn.Module, input_shape: tuple[int, int, int], path: Path) -> None:
    """Write ``model`` to ``path`` as ONNX, atomically (a temporary file, then a rename).

    The legacy TorchScript exporter runs in training mode (with a batch of 2, so BatchNorm
    has more than one value per channel): BatchNorm then stays its own node instead of being
    folded into the convolution before it, and initializers keep their state-dict names, so
    :func:`onnx_layer_specs` on the file gives the same layers as :func:`layer_specs`.
    The model's mode, parameters and buffers (tracing updates BatchNorm statistics) are left
    as they were.
    """
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    first = next(model.parameters(), None)
    device = first.device if first is not None else torch.device("cpu")
    dtype = first.dtype if first is not None and first.is_floating_point() else torch.float32
    dummy = torch.zeros(2, *input_shape, device=device, dtype=dtype)
    was_training = model.training
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with _quiet():
            torch.onnx.export(
                model,
                (dummy,),
                tmp,
                dynamo=False,
                export_params=True,
                do_constant_folding=False,
                training=torch.onnx.TrainingMode.TRAINING,
                input_names=["input"],
                output_names=["logits"],
            )
        os.replace(tmp, path)
    except Exception as exc:  # noqa: BLE001 - the exporter raises many kinds
        line = _first_sentence(str(exc)) or type(exc).__name__
        raise ModelError(
            f"cannot export {type(model).__name__} at input {tuple(input_shape)} to ONNX: {line}",
            "try another input size",
        ) from None
    finally:
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])
        model.train(was_training)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _first_sentence(text: str, limit: int = 200) -> str:
    """The gist of an exporter message: its first line, up to the first full stop."""
    lines = text.strip().splitlines()
    line = lines[0] if lines else ""
    cut = line.find(". ")
    line = (line[:cut] if cut > 0 else line).rstrip(".")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _float_bits() -> dict[int, int]:
    from onnx import TensorProto

    return {
        getattr(TensorProto, n): bits
        for n, bits in _FLOAT_BITS_BY_NAME.items()
        if hasattr(TensorProto, n)
    }


def _layer_name(param_names: list[str], node_name: str) -> str:
    """``layer1.0.conv1.weight`` -> ``layer1.0.conv1``; other names -> the node's name."""
    first = param_names[0]
    if _STATE_DICT_NAME.match(first):
        return first.rsplit(".", 1)[0]
    return node_name or first


def _load(path: Path) -> Any:
    import onnx

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"ONNX file '{path}' not found", "check the path")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf and onnx raise many kinds
        raise ModelError(f"'{path}' is not a valid ONNX model: {exc}") from None
    if not model.graph.node:
        raise ModelError(f"'{path}' is not a valid ONNX model: its graph has no nodes")
    return model


def onnx_layer_specs(path: Path) -> list[LayerSpec]:
    """Parametric layers of any ONNX graph, in node (topological) order.

    A node that consumes floating-point initializers of rank >= 1 is a layer (for
    BatchNormalization only scale and bias count: mean and variance are buffers; inputs of
    shape ops such as Reshape or Resize never count). An initializer consumed by several nodes
    belongs to the first. Parameter-free nodes fold into the next layer, trailing ones into
    the last. The layer's name is its first initializer's module path when that looks like a
    state-dict name (``layer1.0.conv1.weight`` -> ``layer1.0.conv1``), else the node's name.
    """
    model = _load(path)
    bits = _float_bits()
    inits = {t.name: t for t in model.graph.initializer}
    taken: set[str] = set()
    specs: list[LayerSpec] = []
    pending: list[str] = []
    for i, node in enumerate(model.graph.node):
        label = node.name or f"{node.op_type}_{i}"
        params: list[tuple[str, tuple[int, ...], int]] = []  # name, shape, bits per element
        if node.op_type not in _NON_PARAMETRIC_OPS:
            positions = _PARAM_INPUTS.get(node.op_type, range(len(node.input)))
            for pos in positions:
                name = node.input[pos] if pos < len(node.input) else ""
                t = inits.get(name)
                if t is None or name in taken or len(t.dims) == 0 or t.data_type not in bits:
                    continue
                taken.add(name)
                params.append((name, tuple(int(d) for d in t.dims), bits[t.data_type]))
        if not params:
            pending.append(label)
            continue
        names = [n for n, _, _ in params]
        counts = [math.prod(s) for _, s, _ in params]
        specs.append(
            LayerSpec(
                name=_layer_name(names, node.name),
                kind=node.op_type,
                params=tuple(names),
                param_shapes=tuple(s for _, s, _ in params),
                param_bytes=sum(
                    (c * b + 7) // 8 for c, (_, _, b) in zip(counts, params, strict=True)
                ),
                num_params=sum(counts),
                folded=tuple(pending),
            )
        )
        pending = []
    fold_trailing(specs, pending)
    return specs
