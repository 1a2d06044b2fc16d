"""The pipeline family on CUDA (issue 29, item 1), where this machine has it: every technique
trains a tiny run with its stages (or replicas) computing on the GPU and reports the
accelerator's memory per stage; with ``[train] deterministic = true`` mcPipe trains PipeDream's
weights bit for bit there too. The same code path runs on the CPU in
``test_pipeline_device.py`` and in every other pipeline test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.launching import completed

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA (torch.cuda.is_available() is False here)"
)

RECIPE = """
[run]
name = "{technique}"
seed = 2
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "pipeline"
technique = "{technique}"
epochs = 1
batch_size = 16
lr = 0.05
momentum = 0.9
device = "cuda"
deterministic = {deterministic}
[pipeline]
microbatches = 30
[[workers]]
role = "{role}"
count = {count}
[[workers]]
role = "evaluator"
count = 1
"""

SHAPES = {
    "local": ("stage", 1),
    "pipedream": ("stage", 2),
    "greedy": ("stage", 2),
    "mcpipe": ("stage", 2),
    "dataparallel": ("replica", 2),
}


def _run(tmp_path: Path, technique: str, deterministic: bool) -> dict[str, Any]:
    role, count = SHAPES[technique]
    path = tmp_path / f"{technique}-{deterministic}.toml"
    text = RECIPE.format(
        technique=technique, role=role, count=count, deterministic=str(deterministic).lower()
    )
    path.write_text(text)
    _, summary = completed(path, tmp_path / "runs", timeout=300)
    return summary


@pytest.mark.timeout(400)
@pytest.mark.parametrize("technique", sorted(SHAPES))
def test_every_technique_trains_on_cuda_and_reports_its_accelerator_memory(
    tmp_path: Path, technique: str
) -> None:
    summary = _run(tmp_path, technique, deterministic=False)
    assert summary["test_accuracy"] > 0.3
    stages = summary["technique_report"]["stages"]
    assert len(stages) == SHAPES[technique][1]
    for s in stages:
        assert s["device"].startswith("cuda"), s
        mem = s["memory"]
        assert mem["accelerator_allocated_peak_bytes"] > 0
        assert mem["accelerator_reserved_peak_bytes"] >= mem["accelerator_allocated_peak_bytes"]
        assert mem["resident_bytes"] > 0  # the store's own accounting, beside it
    # the last snapshot the evaluator scored (on CUDA too) is the run's model
    assert summary["technique_report"]["snapshots"][-1]["sha256"] == summary["model_sha256"]


@pytest.mark.timeout(600)
def test_mcpipe_trains_pipedreams_weights_on_cuda_with_deterministic_kernels(
    tmp_path: Path,
) -> None:
    shas = {
        t: _run(tmp_path, t, deterministic=True)["model_sha256"] for t in ("pipedream", "mcpipe")
    }
    assert shas["mcpipe"] == shas["pipedream"]
    assert _run(tmp_path, "pipedream", deterministic=True)["model_sha256"] == shas["pipedream"]
