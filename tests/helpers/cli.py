"""Run the edgetrain CLI in-process and capture its exit code and output."""

from __future__ import annotations

import json

import pytest

from edgetrain.cli.app import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def plain_errors(err: str) -> str:
    """stderr as a user would read it: a ``--format json`` error line (``{"error", "fix"}``)
    turned back into ``error: ...; fix`` (launch tests ask for JSON)."""
    lines = err.strip().splitlines()
    try:
        obj = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return err
    if not isinstance(obj, dict) or "error" not in obj:
        return err
    text = f"error: {obj['error']}" + (f"; {obj['fix']}" if obj.get("fix") else "")
    return "\n".join([*lines[:-1], text]) + "\n"


def last_error(err: str) -> str:
    """The last line of stderr, read as :func:`plain_errors` reads it."""
    return plain_errors(err).strip().splitlines()[-1]
