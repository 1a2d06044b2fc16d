"""Shared fixtures: test data location, system-test switch, and reaping of stray processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.procs import edgetrain_processes, kill_all

SYSTEM_TESTS = os.environ.get("EDGETRAIN_SYSTEM_TESTS") == "1"
REPO = Path(__file__).resolve().parents[1]


def skip_or_fail(reason: str) -> None:
    """Skip on a user's machine; under EDGETRAIN_SYSTEM_TESTS=1 (CI) a missing part fails."""
    if SYSTEM_TESTS:
        pytest.fail(f"{reason} (EDGETRAIN_SYSTEM_TESTS=1 turns this skip into a failure)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def test_data_dir() -> Path:
    """Directory holding the shared real datasets (mnist-test/ ...)."""
    env = os.environ.get("EDGETRAIN_TEST_DATA")
    root = Path(env) if env else REPO.parent / "shared" / "data"
    if not (root / "mnist-test" / "t10k-images-idx3-ubyte.gz").is_file():
        skip_or_fail(f"real MNIST test files not found under {root}; set EDGETRAIN_TEST_DATA")
    return root


@pytest.fixture(scope="session", autouse=True)
def _reap_stray_processes():
    """No test may leave an edgetrain process behind: kill any that outlive the session."""
    before = set(edgetrain_processes())
    yield
    stray = {p: c for p, c in edgetrain_processes().items() if p not in before}
    kill_all(stray)
