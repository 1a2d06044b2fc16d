"""Shared fixtures: test data location, system-test switch, and reaping of stray processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.helpers.procs import edgetrain_processes, kill_all
from tests.helpers.skips import skip_or_fail

REPO = Path(__file__).resolve().parents[1]

# A background command of a non-interactive shell (`cmd &` in a script) starts with SIGINT
# ignored, and an ignored signal stays ignored across exec: every process a test starts would
# then ignore the Ctrl-C the test sends it. A handled SIGINT is reset to the default on exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def test_data_dir() -> Path:
    """Directory holding the shared real datasets (mnist-test/ ...)."""
    env = os.environ.get("EDGETRAIN_TEST_DATA")
    root = Path(env) if env else REPO.parent / "shared" / "data"
    if not (root / "mnist-test" / "t10k-images-idx3-ubyte.gz").is_file():
        skip_or_fail(f"real MNIST test files not found under {root}; set EDGETRAIN_TEST_DATA")
    return root


@pytest.fixture(scope="session")
def mnist_test_dir(test_data_dir: Path) -> Path:
    """The real MNIST test set (``mnist-test/``), through :func:`test_data_dir`."""
    return test_data_dir / "mnist-test"


@pytest.fixture(scope="session", autouse=True)
def _reap_stray_processes():
    """No test may leave an edgetrain process behind: kill any of this session's that outlive it.

    Processes are this session's when they inherited its marker in their environment, so
    concurrent test sessions on one machine leave each other's processes alone (workers started
    over ssh do not inherit it; they exit when their ssh session closes)."""
    marker = f"EDGETRAIN_TEST_SESSION={os.getpid()}-{time.time_ns()}"
    key, value = marker.split("=", 1)
    os.environ[key] = value
    before = set(edgetrain_processes())
    yield
    stray = {
        p: c for p, c in edgetrain_processes().items() if p not in before and _has_env(p, marker)
    }
    kill_all(stray)


def _has_env(pid: int, entry: str) -> bool:
    try:
        return entry.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
