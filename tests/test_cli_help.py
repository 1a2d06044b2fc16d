"""Every command's --help as a user reads it: bracketed text kept, no type beside on/off flags,
usage lines without doubled brackets; and errors as JSON when the command asked for JSON."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import typer

from edgetrain.cli.app import app
from tests.helpers.cli import run_cli


def _commands() -> list[tuple[list[str], Any]]:
    root = typer.main.get_command(app)
    out: list[tuple[list[str], Any]] = []  # (typer vendors click: duck-typed)

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        else:
            out.append((path, cmd))

    walk(root, [])
    return out


COMMANDS = _commands()


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=" ".join)
def test_help_keeps_brackets_and_shows_no_flag_types(
    path: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(capsys, *path, "--help")
    assert code == 0
    assert "<bool>" not in out
    usage = next(line for line in out.splitlines() if "Usage:" in line)
    assert "[[" not in usage
    cmd = dict((tuple(p), c) for p, c in COMMANDS)[tuple(path)]
    texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
    flat = " ".join(out.split())
    for text in texts:
        # every [section] a help text names must survive rich's markup
        for token in re.findall(r"\\?\[([a-z_]+)\]", text):
            assert f"[{token}]" in flat, (path, token)


def test_errors_are_json_when_json_was_asked(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "launch", "nope.toml", "--format", "json")
    assert code == 2
    assert json.loads(err) == {
        "error": "recipe file 'nope.toml' not found",
        "fix": "check the path",
    }
    code, _, err = run_cli(capsys, "launch", "--bogus", "-f", "json")
    assert code == 2 and json.loads(err)["fix"] == "see 'edgetrain launch --help'"
    code, _, err = run_cli(capsys, "launch", "nope.toml")
    assert code == 2 and err == "error: recipe file 'nope.toml' not found; check the path\n"
