"""A process that ends through exit_now keeps what it printed and logged, and its code; the
normal exit stays where a profiler, a tracer or the user asks for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from edgetrain.cli.exit_now import watched

SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
logging.getLogger("x").info("logged before the exit")
sys.stdout.write("printed without a newline or a flush")
from edgetrain.cli.exit_now import exit_now
exit_now(3)
print("never")
"""


@pytest.mark.timeout(60)
def test_exit_now_flushes_what_was_written_and_keeps_the_code() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=50, check=False
    )
    assert done.returncode == 3
    assert done.stdout == "printed without a newline or a flush"
    assert done.stderr == "logged before the exit\n"


def test_a_profiler_a_tracer_or_the_user_keeps_the_normal_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EDGETRAIN_FULL_EXIT", raising=False)
    before = sys.gettrace()  # pytest's own (a debugger's, coverage's) when there is one
    try:
        sys.settrace(None)
        profile = sys.getprofile()
        sys.setprofile(None)
        assert watched() is False
        monkeypatch.setenv("EDGETRAIN_FULL_EXIT", "1")
        assert watched() is True
        monkeypatch.setenv("EDGETRAIN_FULL_EXIT", "0")
        assert watched() is False
        sys.setprofile(lambda *a: None)
        assert watched() is True
        sys.setprofile(profile)
    finally:
        sys.settrace(before)
