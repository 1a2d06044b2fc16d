"""Run ``edgetrain profile`` in-process or as a subprocess, for the profile tests."""

from __future__ import annotations

import sys

import pytest
import torch

from tests.helpers.cli import run_cli


def cli_argv(*argv: str) -> list[str]:
    """The argv of an ``edgetrain`` subprocess (this interpreter, ``-m edgetrain``)."""
    return [sys.executable, "-m", "edgetrain", *argv]


def run_profile(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """:func:`tests.helpers.cli.run_cli`, then torch's thread count restored (``--threads``
    sets it)."""
    threads = torch.get_num_threads()
    try:
        return run_cli(capsys, *argv)
    finally:
        torch.set_num_threads(threads)
