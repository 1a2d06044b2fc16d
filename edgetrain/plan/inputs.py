"""Read planner inputs: a cost file, or a profile plus link figures (the only I/O in plan/)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.errors import EdgetrainError
from edgetrain.plan.costs import LayerCosts


class PlanInputError(EdgetrainError):
    """A cost or profile file the planner cannot use."""


@dataclass(frozen=True)
class LinkFigures:
    """What the planner knows of the link: bandwidth (bytes/s) and per-transmission overhead."""

    bandwidth_Bps: float
    dt_s: float
    dt_source: str  # "--dt", "profile link probe", "--rtt"


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise PlanInputError(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanInputError(f"{what} {path} is not readable JSON ({exc})") from None


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanInputError(f"{where} must be a number of seconds")
    return float(value)


def load_costs(path: Path) -> LayerCosts:
    """``{"dt": s, "layers": [{"name", "pt", "fc", "bc", "gt"}, ...]}``."""
    data = _read_json(path, "cost file")
    if not isinstance(data, dict) or not isinstance(data.get("layers"), list):
        raise PlanInputError(
            f"cost file {path} must be an object with 'dt' and a list 'layers' of "
            '{"name", "pt", "fc", "bc", "gt"}'
        )
    if not data["layers"]:
        raise PlanInputError(f"cost file {path} has no layers")
    dt = _number(data.get("dt"), f"{path}: dt")
    cols: dict[str, list[float]] = {k: [] for k in ("pt", "fc", "bc", "gt")}
    names = []
    for i, layer in enumerate(data["layers"]):
        if not isinstance(layer, dict):
            raise PlanInputError(f"{path}: layers[{i}] must be an object")
        names.append(str(layer.get("name", f"layer{i + 1}")))
        for key, col in cols.items():
            col.append(_number(layer.get(key), f"{path}: layers[{i}].{key}"))
    return _costs(cols, dt, names, str(path))


def _costs(cols: dict[str, list[float]], dt: float, names: list[str], src: str) -> LayerCosts:
    try:
        return LayerCosts(
            np.array(cols["pt"]),
            np.array(cols["fc"]),
            np.array(cols["bc"]),
            np.array(cols["gt"]),
            dt,
            tuple(names),
        )
    except ValueError as exc:
        raise PlanInputError(f"{src}: {exc}") from None


def read_profile(path: Path) -> dict[str, Any]:
    data = _read_json(path, "profile")
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list) or not layers:
        raise PlanInputError(
            f"profile {path} has no 'layers'; write one with 'edgetrain profile --run-dir RUN'"
        )
    return dict(data)


def link_figures(
    profile: dict[str, Any],
    bandwidth_Bps: float | None,
    rtt_s: float | None,
    dt: float | None,
) -> LinkFigures:
    """Bandwidth and dt from the command line, else from the profile's first link probe."""
    links = [x for x in profile.get("links", []) if isinstance(x, dict)]
    link = links[0] if links else None
    if bandwidth_Bps is None:
        if link is None or not isinstance(link.get("bandwidth_Bps"), (int, float)):
            raise PlanInputError(
                "the profile has no link probe; give --bandwidth (e.g. 100mbit), or profile "
                "with --peer tcp://HOST:PORT"
            )
        bandwidth_Bps = float(link["bandwidth_Bps"])
    if dt is not None:
        return LinkFigures(bandwidth_Bps, dt, "--dt")
    if link is not None and isinstance(link.get("dt_s"), (int, float)):
        return LinkFigures(bandwidth_Bps, float(link["dt_s"]), "profile link probe")
    if rtt_s is not None:
        return LinkFigures(bandwidth_Bps, rtt_s, "--rtt")
    raise PlanInputError(
        "dt is unknown: the profile has no link probe; give --dt SECONDS or --rtt (e.g. 10ms)"
    )


def costs_from_profile(profile: dict[str, Any], link: LinkFigures, src: str) -> LayerCosts:
    """pt = gt = parameter bytes / bandwidth; fc, bc = the profile's measured seconds."""
    cols: dict[str, list[float]] = {k: [] for k in ("pt", "fc", "bc", "gt")}
    names = []
    for i, layer in enumerate(profile["layers"]):
        if not isinstance(layer, dict):
            raise PlanInputError(f"{src}: layers[{i}] must be an object")
        where = f"{src}: layers[{i}]"
        size = _number(layer.get("param_bytes"), f"{where}.param_bytes")
        names.append(str(layer.get("name", f"layer{i + 1}")))
        cols["pt"].append(size / link.bandwidth_Bps)
        cols["gt"].append(size / link.bandwidth_Bps)
        cols["fc"].append(_number(layer.get("fwd_s"), f"{where}.fwd_s"))
        cols["bc"].append(_number(layer.get("bwd_s"), f"{where}.bwd_s"))
    return _costs(cols, link.dt_s, names, src)
