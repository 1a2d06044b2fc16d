"""Run the edgetrain CLI in-process and capture its exit code and output."""

from __future__ import annotations

import pytest

from edgetrain.cli.app import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err
