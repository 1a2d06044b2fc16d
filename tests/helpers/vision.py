"""torchvision is optional (the `vision` extra): tests that build its models skip without it,
so every other test runs on torch alone (scripts/ci-torch-only)."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import util
from typing import Any

import pytest

from edgetrain.models.catalog import TORCHVISION_MODELS

TORCHVISION = util.find_spec("torchvision") is not None

needs_torchvision = pytest.mark.skipif(
    not TORCHVISION, reason="needs torchvision: pip install 'edgetrain[vision]'"
)


def model_params(cases: Iterable[Any]) -> list[Any]:
    """``cases`` for ``pytest.mark.parametrize``, each naming a torchvision model (a name, or a
    tuple whose first item is one) marked :data:`needs_torchvision`."""
    out: list[Any] = []
    for case in cases:
        name = case[0] if isinstance(case, tuple) else case
        if name in TORCHVISION_MODELS:
            values = case if isinstance(case, tuple) else (case,)
            out.append(pytest.param(*values, marks=needs_torchvision))
        else:
            out.append(case)
    return out
