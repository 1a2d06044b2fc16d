"""What every reproduction script shares: how it ends on an error and on Ctrl-C."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from edgetrain.errors import EdgetrainError
from edgetrain.reproduce import cli


def _parser() -> argparse.ArgumentParser:
    return cli.parser("paper", "doc", quick="q", smoke="s", seeds=2)


def test_ctrl_c_is_one_line_naming_the_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> dict[str, Any]:
        raise KeyboardInterrupt

    code = cli.run(_parser(), ["--out", str(tmp_path / "out")], interrupted)
    err = capsys.readouterr().err
    assert code == 130
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(tmp_path / "out") in err and "resume" in err


def test_an_error_is_one_line_and_its_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    def failing(args: argparse.Namespace) -> dict[str, Any]:
        raise EdgetrainError("the pilot diverged", "lower the learning rate")

    code = cli.run(_parser(), [], failing)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: the pilot diverged") and "Traceback" not in err
