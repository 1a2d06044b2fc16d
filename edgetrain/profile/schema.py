"""The profile JSON (``RUN/profiles/<host>.json``, schema version 1): build, check, read, write.

Contract read by the planners (keep these fields and meanings)::

    {"schema_version": 1, "host": str, "created": iso time,
     "device": {"cpu_model", "cores", "memory_bytes", "torch_threads", "cuda": null | name, ...},
     "model": str, "input": [C, H, W], "batch_sizes": [int, ...],
     "layers": [{"name", "param_bytes", "activation_bytes", "fwd_s", "bwd_s",
                 "fwd_iqr_s", "bwd_iqr_s"}, ...],       # times at the FIRST batch size
     "step_s": float,                                   # whole training step, first batch size
     "throughput": {"8": samples/s, ...},               # keys are strings
     "links": [{"peer", "bandwidth_Bps", "rtt_s", "dt_s", ...}, ...],
     "peak_memory_bytes": int, "compute_source": "measured" | "flops_estimate", ...}

``bwd_s`` includes the layer's share of the optimizer step (see
:mod:`edgetrain.profile.timeline`); activation bytes are the layer segment's output at the first
batch size.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.rundir import atomic_write_json, now_iso

SCHEMA_VERSION = 1
COMPUTE_SOURCES = ("measured", "flops_estimate")
_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

_TOP: dict[str, type | tuple[type, ...]] = {
    "schema_version": int,
    "host": str,
    "device": dict,
    "model": (str, type(None)),
    "input": (list, type(None)),
    "batch_sizes": list,
    "layers": list,
    "step_s": (float, int, type(None)),
    "throughput": dict,
    "links": list,
    "peak_memory_bytes": (int, type(None)),
    "compute_source": (str, type(None)),
}
_LAYER = {"name": str, "param_bytes": int, "activation_bytes": int, "fwd_s": float, "bwd_s": float}
_LINK = {"peer": str, "bandwidth_Bps": float, "rtt_s": float, "dt_s": float}
_DEVICE = ("cpu_model", "cores", "memory_bytes", "torch_threads", "cuda")


class ProfileError(EdgetrainError):
    """A profile file that is missing or does not follow the schema."""


def check_host_name(host: str) -> str:
    """A host name usable as a file stem, or a :class:`ProfileError`."""
    if not _HOST_RE.match(host):
        raise ProfileError(
            f"host name {host!r} is not usable as a file name",
            "use letters, digits, '.', '_' or '-' (--host-name)",
        )
    return host


def profile_path(run_dir: Path, host: str) -> Path:
    return Path(run_dir) / "profiles" / f"{check_host_name(host)}.json"


def _is(value: Any, kind: type | tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        kind = (float, int)
    return isinstance(value, kind)


def validate_profile(data: Any) -> dict[str, Any]:
    """Check ``data`` against schema version 1; return it, or raise :class:`ProfileError`."""
    if not isinstance(data, dict):
        raise ProfileError("profile is not a JSON object")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ProfileError(f"profile schema_version {data.get('schema_version')!r} is not 1")
    for key, kind in _TOP.items():
        if key not in data or not _is(data[key], kind):
            raise ProfileError(f"profile field {key!r} is missing or has the wrong type")
    for key in _DEVICE:
        if key not in data["device"]:
            raise ProfileError(f"profile device field {key!r} is missing")
    _check_items(data["layers"], _LAYER, "layers")
    _check_items(data["links"], _LINK, "links")
    for key, value in data["throughput"].items():
        if not key.isdigit() or not _is(value, float):
            raise ProfileError(f"profile throughput entry {key!r} must map a batch size to a float")
    if data["compute_source"] not in (*COMPUTE_SOURCES, None):
        raise ProfileError(f"profile compute_source {data['compute_source']!r} is unknown")
    return data


def _check_items(items: list[Any], fields: Mapping[str, type], what: str) -> None:
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ProfileError(f"profile {what}[{i}] is not an object")
        for key, kind in fields.items():
            if key not in item or not _is(item[key], kind):
                raise ProfileError(f"profile {what}[{i}].{key} is missing or has the wrong type")


def empty_profile(host: str, device: Mapping[str, Any]) -> dict[str, Any]:
    """A profile with no compute part and no links yet."""
    return {
        "schema_version": SCHEMA_VERSION,
        "host": check_host_name(host),
        "created": now_iso(),
        "device": dict(device),
        "model": None,
        "input": None,
        "batch_sizes": [],
        "layers": [],
        "step_s": None,
        "throughput": {},
        "links": [],
        "peak_memory_bytes": None,
        "compute_source": None,
    }


def read_profile(path: Path) -> dict[str, Any]:
    """Load and validate a profile file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"profile '{path}' not found", "run 'edgetrain profile' first") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProfileError(f"profile '{path}' is not readable JSON: {exc}") from None
    return validate_profile(data)


def write_profile(path: Path, data: dict[str, Any]) -> None:
    """Validate and write atomically."""
    atomic_write_json(Path(path), validate_profile(data))
