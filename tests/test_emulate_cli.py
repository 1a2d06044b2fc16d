"""``edgetrain emulate``: bad input gets one line and exit 2, before anything is built."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgetrain.emulate import testbed
from tests.helpers.cli import run_cli
from tests.helpers.paths import TESTBEDS
from tests.helpers.skips import skip_or_fail


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "emulate", "--help")
    assert code == 0
    for cmd in ("up", "status", "verify", "down", "trace"):
        assert cmd in out
    code, out, _ = run_cli(capsys, "emulate", "up", "--help")
    assert code == 0 and "dlion-4.toml" in out and "--verify" in out


def test_missing_and_bad_specs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "emulate", "up", str(tmp_path / "none.toml"))
    assert code == 2 and "not found" in _one_line(err)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[sites]]\nname = "a"\nlan = "fast"\n[[sites.hosts]]\nname = "h"\ncpu = 1\n')
    code, _, err = run_cli(capsys, "emulate", "up", str(bad))
    assert code == 2 and "[[sites]] #1 lan" in _one_line(err) and "not a rate" in err
    code, _, err = run_cli(capsys, "emulate", "up", str(TESTBEDS / "dlion-4.toml"), "--name", "X!")
    assert code == 2 and "--name" in _one_line(err)


def test_up_without_root_refuses(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    for args in (
        ("up", str(TESTBEDS / "dlion-4.toml")),
        ("down", "dlion-4"),
        ("verify", "dlion-4"),
        ("trace", "dlion-4", str(TESTBEDS / "traces" / "dlion-4-wan-dip.toml")),
    ):
        code, _, err = run_cli(capsys, "emulate", *args, "--state-dir", str(tmp_path))
        assert code == 2, err
        assert "needs root" in _one_line(err) and "sudo" in err
    assert not any(tmp_path.iterdir())  # nothing written


def test_status_with_nothing_up(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run_cli(capsys, "emulate", "status", "--state-dir", str(tmp_path))
    assert code == 0 and "no testbed is up" in out
    code, out, _ = run_cli(
        capsys, "emulate", "status", "--state-dir", str(tmp_path), "--format", "json"
    )
    assert code == 0 and '"testbeds": []' in out
    code, _, err = run_cli(capsys, "emulate", "status", "nosuch", "--state-dir", str(tmp_path))
    assert code == 2 and "testbed 'nosuch' is not up" in _one_line(err)


def test_down_is_idempotent_and_checks_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        skip_or_fail("down removes namespaces: root only")
    state = str(tmp_path)
    code, out, _ = run_cli(capsys, "emulate", "down", "never-up", "--state-dir", state)
    assert code == 0 and "nothing to remove" in out
    code, _, err = run_cli(capsys, "emulate", "down", "--state-dir", state)
    assert code == 2 and "no testbed is up" in _one_line(err)
    code, _, err = run_cli(capsys, "emulate", "down", "../etc", "--state-dir", state)
    assert code == 2 and "not a testbed name" in _one_line(err)


def test_up_refuses_more_cpu_than_the_machine(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        skip_or_fail("the checks run as root only")
    if (reason := testbed.requirements_unavailable()) is not None:
        skip_or_fail(reason)
    spec = tmp_path / "big.toml"
    cpus = (os.cpu_count() or 1) + 1
    spec.write_text(
        f'[[sites]]\nname = "a"\nlan = "1gbit"\n[[sites.hosts]]\nname = "h"\ncpu = {cpus}\n'
    )
    code, _, err = run_cli(capsys, "emulate", "up", str(spec), "--state-dir", str(tmp_path / "s"))
    assert code == 2 and "more CPU than this machine" in _one_line(err)
    assert not (tmp_path / "s").exists()
