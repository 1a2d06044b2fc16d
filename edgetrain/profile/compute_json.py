"""The compute part of the profile JSON (:mod:`.schema`), from a measured
:class:`ComputeProfile`; :mod:`.run` joins the links in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from edgetrain.profile.compute import ComputeProfile


def compute_fields(
    model: str,
    input_shape: Sequence[int],
    batch_sizes: Sequence[int],
    cp: ComputeProfile,
    source: str,
) -> dict[str, Any]:
    """The compute fields of a profile, from a :class:`ComputeProfile`."""
    return {
        "model": model,
        "input": [int(d) for d in input_shape],
        "batch_sizes": [int(b) for b in batch_sizes],
        "layers": [
            {
                "name": lp.name,
                "param_bytes": lp.param_bytes,
                "activation_bytes": lp.activation_bytes,
                "fwd_s": lp.fwd_s,
                "bwd_s": lp.bwd_s,
                "fwd_iqr_s": lp.fwd_iqr_s,
                "bwd_iqr_s": lp.bwd_iqr_s,
            }
            for lp in cp.layers
        ],
        "step_s": cp.step_s,
        "step_iqr_s": cp.step_iqr_s,
        "step_median_s": cp.step_median_s,
        "hooked_step_s": cp.hooked_step_s,
        "layer_sum_s": cp.layer_sum_s,
        "layer_sum_ratio": cp.layer_sum_ratio,
        "throughput": _str_keys(cp.throughput),
        "step_s_by_batch": _str_keys(cp.step_s_by_batch),
        "peak_memory_bytes": cp.peak_memory_bytes,
        "peak_memory_by_batch": _str_keys(cp.peak_memory_by_batch),
        "peak_memory_source": cp.peak_memory_source,
        "repeats": cp.repeats,
        "warmup": cp.warmup,
        "compute_source": source,
        "cpu_quota": (
            None if cp.quota is None else {"cores": cp.quota[0], "period_s": cp.quota[1]}
        ),
        "sustained_step_s": cp.sustained_step_s,
        "throttle_factor": cp.throttle_factor,
    }


def _str_keys(d: Mapping[int, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in d.items()}
