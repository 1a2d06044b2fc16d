"""One ``edgetrain profile`` invocation: measure what was asked and return the profile JSON."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgetrain.errors import EdgetrainError
from edgetrain.profile import schema
from edgetrain.profile.compute_json import compute_fields
from edgetrain.profile.device import device_info
from edgetrain.profile.probe import ProbeConfig, check_endpoint, probe_link

if TYPE_CHECKING:  # torch loads with the compute profiler, not with this module
    from edgetrain.profile.compute import ComputeConfig

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class ProfileRequest:
    """Validated options of one profiling run."""

    host: str
    model: str | None = None
    input_shape: tuple[int, int, int] = (3, 32, 32)
    classes: int = 10
    batch_sizes: tuple[int, ...] = (32,)
    repeats: int = 10
    warmup: int = 3
    min_time_s: float = 1.0
    device: str = "cpu"
    threads: int | None = None
    peers: tuple[str, ...] = ()
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    torch_model: str | None = None
    run_dir: Path | None = None
    model_options: Mapping[str, Any] = field(default_factory=dict)
    # samples of the run's data to time the steps on (float32, N x input_shape), and the
    # dataset's name; None: random inputs (timing depends on them: edgetrain.profile.compute)
    inputs: Any = field(default=None, compare=False, repr=False)
    data: str | None = None

    def __post_init__(self) -> None:
        schema.check_host_name(self.host)
        if self.model is None and not self.peers:
            raise EdgetrainError("nothing to profile", "give --model NAME and/or --peer ENDPOINT")
        for p in self.peers:
            check_endpoint(p)
        if self.model is not None:
            _check_model(self.model, self.torch_model)
        if self.model_options:
            _check_options(self.model, self.model_options)
        if self.inputs is not None and tuple(self.inputs.shape[1:]) != tuple(self.input_shape):
            shape = "x".join(str(d) for d in self.inputs.shape[1:])
            raise EdgetrainError(
                f"--data {self.data}: its samples are {shape}, the model's input "
                f"{'x'.join(str(d) for d in self.input_shape)}",
                "drop --input (the data's shape is taken) or give the data's shape",
            )
        if self.threads is not None and self.threads < 1:
            raise EdgetrainError(f"--threads {self.threads} must be >= 1")
        if self.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise EdgetrainError(f"--device {self.device}: no CUDA device here", "use cpu")
        elif self.device != "cpu":
            raise EdgetrainError(f"--device {self.device!r} unknown", "use cpu or cuda")


def _check_options(model: str | None, options: Mapping[str, Any]) -> None:
    """A zoo model's options (as a recipe's ``[model]`` table gives them), checked before
    anything is measured."""
    from edgetrain.errors import ModelError
    from edgetrain.models.zoo import check_model_config

    if model is None or model.lower().endswith(".onnx") or Path(model).is_file():
        raise EdgetrainError(
            "--model-option applies to a zoo model", "drop --model-option or name a zoo model"
        )
    try:
        check_model_config(model, dict(options))
    except ModelError as exc:
        raise EdgetrainError(f"--model-option: {exc.problem}", exc.fix) from None


def _check_model(model: str, torch_model: str | None) -> None:
    """Fail fast, before any measuring, on an unknown zoo model or a missing ONNX file."""
    from edgetrain.models import check_model_config

    if model.lower().endswith(".onnx") or Path(model).is_file():
        if not Path(model).is_file():
            raise EdgetrainError(f"--model: ONNX file '{model}' not found", "check the path")
        if torch_model is not None:
            check_model_config(torch_model)
    else:
        check_model_config(model)


def _base(req: ProfileRequest) -> dict[str, Any]:
    """The existing profile of this host in the run directory (links are refreshed), or new."""
    if req.run_dir is not None and req.model is None:
        path = schema.profile_path(req.run_dir, req.host)
        if path.is_file():
            data = schema.read_profile(path)
            data["device"] = device_info()
            return data
    return schema.empty_profile(req.host, device_info())


def make_profile(req: ProfileRequest, progress: Progress | None = None) -> dict[str, Any]:
    """Measure the compute part (with ``model``) and the links (with ``peers``)."""
    import torch

    if req.threads is not None:
        torch.set_num_threads(req.threads)
    data = _base(req)
    if req.model is not None:
        data.update(_compute(req, progress))
    links = {link["peer"]: link for link in data["links"]}
    for i, peer in enumerate(req.peers):
        if progress:
            progress(f"link {peer}", i, len(req.peers))
        links[peer] = probe_link(peer, req.probe).to_dict()
    data["links"] = list(links.values())
    data["device"]["torch_threads"] = torch.get_num_threads()
    return schema.validate_profile(data)


def compute_config(req: ProfileRequest, quota: tuple[float, float] | None) -> ComputeConfig:
    """What to time for ``req`` (``quota``: the CPU quota the process runs under)."""
    from edgetrain.profile.compute import ComputeConfig

    return ComputeConfig(
        batch_sizes=req.batch_sizes,
        warmup=req.warmup,
        repeats=req.repeats,
        min_time_s=req.min_time_s,
        device=req.device,
        num_classes=req.classes,
        quota=quota,
        inputs=req.inputs,
    )


def _compute(req: ProfileRequest, progress: Progress | None) -> dict[str, Any]:
    from edgetrain.models import build_model, layer_specs
    from edgetrain.profile.compute import profile_compute
    from edgetrain.profile.scope import process_quota

    assert req.model is not None
    cfg = compute_config(req, process_quota() if req.device == "cpu" else None)
    if req.model.lower().endswith(".onnx") or Path(req.model).is_file():
        from edgetrain.profile.onnx_costs import profile_onnx

        return profile_onnx(Path(req.model), cfg, req.torch_model, req.classes, progress)
    model = build_model(req.model, req.input_shape, req.classes, dict(req.model_options))
    specs = layer_specs(model, req.input_shape)
    cp = profile_compute(model, specs, req.input_shape, cfg, progress)
    out = compute_fields(req.model, req.input_shape, req.batch_sizes, cp, "measured")
    out["timed_on"] = f"data:{req.data}" if req.inputs is not None else "random"
    if req.model_options:
        out["model_options"] = dict(req.model_options)
    return out


SAMPLES = 256  # the samples a profile times its steps on (cycled to larger batches)


def data_samples(cfg: Any, seed: int = 0) -> tuple[Any, tuple[int, int, int], int]:
    """The first :data:`SAMPLES` training samples of a ``[data]`` section as the run's
    workers see them (normalised), their shape and the classes (DataError where unreadable)."""
    from edgetrain.data.loaders import load_dataset

    data = load_dataset(cfg, seed)
    return first_samples(data), data.input_shape, data.classes


def first_samples(data: Any) -> Any:
    """A loaded dataset's first :data:`SAMPLES` training samples, float32 and contiguous: what
    a profile times its steps on."""
    import numpy as np

    return np.ascontiguousarray(data.x_train[:SAMPLES], dtype=np.float32)


def save_profile(run_dir: Path, data: dict[str, Any]) -> Path:
    """Write ``RUN/profiles/<host>.json`` atomically; return its path."""
    path = schema.profile_path(run_dir, data["host"])
    schema.write_profile(path, data)
    return path
