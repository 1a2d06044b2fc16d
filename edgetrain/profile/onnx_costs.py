"""Compute costs of any ONNX graph: its layer specs, per-layer FLOPs, and a time estimate.

Layers come from :func:`edgetrain.models.onnx_layer_specs` (initializers grouped per
parametric node, parameter-free nodes folded into the next layer). Each layer's nodes are found
again by walking the graph in the same order: a layer owns its folded nodes and its own node
(the last layer also the trailing ones). FLOPs per node come from shapes inferred by
``onnx.shape_inference`` (multiply-adds count two):

- Conv: 2 x output elements x (input channels / groups) x kernel area
- Gemm / MatMul: 2 x output elements x inner dimension
- pooling: output elements x kernel area; BatchNormalization: 4 per element
- anything else: one per output element

Without a torch model, ``fwd_s`` = FLOPs / the device's measured FLOP rate (a float32
matmul), and ``bwd_s`` = 2 x ``fwd_s`` (gradients for inputs and weights each cost about a
forward). The profile then says ``"compute_source": "flops_estimate"``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgetrain.errors import ModelError
from edgetrain.models.layers import LayerSpec
from edgetrain.profile.compute import ComputeConfig, Progress
from edgetrain.profile.device import measure_flop_rate

_POOLS = {"MaxPool", "AveragePool", "LpPool"}
_BWD_OVER_FWD = 2.0


def _shapes(model: Any) -> dict[str, list[int]]:
    """Inferred shapes by value name; unknown dimensions are 0."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference is best effort; unknown shapes cost 0
        inferred = model
    g = inferred.graph
    out: dict[str, list[int]] = {}
    for vi in (*g.input, *g.value_info, *g.output):
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = [d.dim_value if d.HasField("dim_value") else 0 for d in dims]
    for t in g.initializer:
        out[t.name] = [int(d) for d in t.dims]
    return out


def _attr(node: Any, name: str, default: Any) -> Any:
    import onnx

    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def node_flops(node: Any, shapes: dict[str, list[int]]) -> float:
    """Floating-point operations of one node (see the module docstring)."""
    out = shapes.get(node.output[0], []) if node.output else []
    n_out = math.prod(out) if out else 0
    op = node.op_type
    if op == "Conv" and len(node.input) > 1:
        w = shapes.get(node.input[1], [])
        return 2.0 * n_out * math.prod(w[1:]) if len(w) > 2 else float(n_out)
    if op in ("Gemm", "MatMul") and node.input:
        a = shapes.get(node.input[0], [])
        trans = op == "Gemm" and _attr(node, "transA", 0)
        k = (a[0] if trans else a[-1]) if a else 0
        return 2.0 * n_out * k
    if op in _POOLS:
        return float(n_out * math.prod(_attr(node, "kernel_shape", [1])))
    if op == "BatchNormalization":
        return 4.0 * n_out
    return float(n_out)


def _output_bytes(node: Any, shapes: dict[str, list[int]]) -> int:
    dims = shapes.get(node.output[0], []) if node.output else []
    return 4 * math.prod(dims) if dims else 0


def layer_costs(path: Path) -> tuple[list[LayerSpec], list[float], list[int], int]:
    """Specs, FLOPs per layer, output bytes per layer, and the graph's batch dimension."""
    import onnx

    from edgetrain.models import onnx_layer_specs

    specs = onnx_layer_specs(path)
    model = onnx.load(str(path), load_external_data=False)
    shapes = _shapes(model)
    nodes = list(model.graph.node)
    flops, acts, pos = [], [], 0
    for i, spec in enumerate(specs):
        count = len(nodes) - pos if i == len(specs) - 1 else len(spec.folded) + 1
        group = nodes[pos : pos + count]
        pos += count
        flops.append(sum(node_flops(n, shapes) for n in group))
        acts.append(_output_bytes(group[-1], shapes) if group else 0)
    inputs = {t.name for t in model.graph.initializer}
    first = next((vi for vi in model.graph.input if vi.name not in inputs), None)
    batch = shapes.get(first.name, [0])[0] if first is not None else 0
    return specs, flops, acts, max(int(batch), 1)


def graph_input_shape(path: Path) -> list[int] | None:
    """[C, H, W] of the graph's first (non-initializer) input, when static and 4-D."""
    import onnx

    g = onnx.load(str(path), load_external_data=False).graph
    inits = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name in inits:
            continue
        dims = [
            d.dim_value if d.HasField("dim_value") else 0 for d in vi.type.tensor_type.shape.dim
        ]
        return dims[1:] if len(dims) == 4 and all(dims[1:]) else None
    return None


def profile_onnx(
    path: Path,
    cfg: ComputeConfig,
    torch_model: str | None,
    classes: int,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Compute fields of a profile for an ONNX file (measured with ``torch_model``, else
    estimated from FLOPs)."""
    specs, flops, acts, graph_batch = layer_costs(path)
    shape = graph_input_shape(path)
    if torch_model is not None:
        return _measured(path, specs, shape, cfg, torch_model, classes, progress)
    rate = measure_flop_rate(cfg.device)
    first = cfg.batch_sizes[0]
    fwd = [f / graph_batch * first / rate for f in flops]
    step = {
        bs: (1 + _BWD_OVER_FWD) * sum(flops) / graph_batch * bs / rate for bs in cfg.batch_sizes
    }
    act_first = [a * first // graph_batch for a in acts]
    params = sum(s.param_bytes for s in specs)
    return {
        "model": str(path),
        "input": shape,
        "batch_sizes": list(cfg.batch_sizes),
        "layers": [
            {
                "name": s.name,
                "param_bytes": s.param_bytes,
                "activation_bytes": act_first[i],
                "fwd_s": fwd[i],
                "bwd_s": _BWD_OVER_FWD * fwd[i],
                "flops": flops[i] / graph_batch * first,
            }
            for i, s in enumerate(specs)
        ],
        "step_s": step[first],
        "throughput": {str(bs): bs / t if t > 0 else 0.0 for bs, t in step.items()},
        "step_s_by_batch": {str(bs): t for bs, t in step.items()},
        "peak_memory_bytes": 3 * params + sum(act_first),
        "peak_memory_source": "estimate: 3 x parameter bytes + activation bytes",
        "flop_rate": rate,
        "compute_source": "flops_estimate",
    }


def _measured(
    path: Path,
    specs: Sequence[LayerSpec],
    shape: list[int] | None,
    cfg: ComputeConfig,
    name: str,
    classes: int,
    progress: Progress | None,
) -> dict[str, Any]:
    from edgetrain.models import build_model, layer_specs
    from edgetrain.profile.compute import profile_compute
    from edgetrain.profile.compute_json import compute_fields

    if shape is None:
        raise ModelError(f"'{path}' has no static CxHxW input", "export it with a fixed input")
    in_shape = (shape[0], shape[1], shape[2])
    model = build_model(name, in_shape, classes)
    torch_specs = layer_specs(model, in_shape)
    ours = [(s.name, s.param_bytes) for s in torch_specs]
    theirs = [(s.name, s.param_bytes) for s in specs]
    if ours != theirs:
        raise ModelError(
            f"--torch-model {name} does not match '{path}' (layers or parameter sizes differ)",
            "check --classes, or leave --torch-model out for a FLOP estimate",
        )
    cp = profile_compute(model, torch_specs, in_shape, cfg, progress)
    data = compute_fields(str(path), in_shape, cfg.batch_sizes, cp, "measured")
    data["torch_model"] = name
    return data
