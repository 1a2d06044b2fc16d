"""The CPU twin that measures shapes of models built on the meta device: the same unit table
and flat features as the meta forward, without importing torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from edgetrain.models import build_model
from edgetrain.models.twin import TWIN_MAX_BYTES, cpu_twin, needs_twin
from edgetrain.pipeline.chain import build_units
from edgetrain.pipeline.table import unit_table


@pytest.mark.parametrize(
    ("name", "shape", "options"),
    [("mlp", (1, 8, 8), {}), ("lenet5", (1, 28, 28), {}), ("cnn2", (3, 32, 32), {})],
)
def test_the_unit_table_of_a_meta_model_is_the_cpu_models(
    name: str, shape: tuple[int, int, int], options: dict[str, object]
) -> None:
    torch.manual_seed(0)
    cpu = unit_table(build_units(build_model(name, shape, 10, options), name), shape)
    with torch.device("meta"):
        meta_model = build_model(name, shape, 10, options)
    meta = unit_table(build_units(meta_model, name), shape)
    assert [u.to_dict() for u in meta] == [u.to_dict() for u in cpu]
    assert all(p.is_meta for p in meta_model.parameters())  # the caller's model is untouched


def test_a_twin_keeps_shared_modules_shared_and_leaves_large_models_on_meta() -> None:
    with torch.device("meta"):
        shared = nn.Linear(4, 4)
        holder = {"a": nn.Sequential(shared, nn.ReLU()), "b": shared}
    twin = cpu_twin(holder)
    assert twin["a"][0] is twin["b"]
    assert twin["b"].weight.device.type == "cpu" and twin["b"].weight.shape == (4, 4)
    assert holder["b"].weight.is_meta
    with torch.device("meta"):
        big = nn.Linear(1 + TWIN_MAX_BYTES // 4, 1, bias=False)
    assert not needs_twin([big])
    assert not needs_twin([nn.Linear(2, 2)])  # already on the CPU


def test_sizing_a_model_on_meta_does_not_import_dynamo() -> None:
    code = (
        "import sys, torch\n"
        "from edgetrain.models import build_model\n"
        "from edgetrain.pipeline.chain import build_units\n"
        "from edgetrain.pipeline.table import unit_table\n"
        "with torch.device('meta'):\n"
        "    m = build_model('lenet5', (1, 28, 28), 10, {})\n"
        "unit_table(build_units(m, 'lenet5'), (1, 28, 28))\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "False"
