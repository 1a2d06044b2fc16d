"""Atomic artifact writes: the file lands whole, no temporary file stays, and it gets the mode
a plain ``open`` would give it (a report written under sudo stays readable by its user)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from edgetrain.rundir import atomic_write_json, atomic_write_text


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_an_atomic_write_gets_the_mode_of_a_plain_open(
    tmp_path: Path, umask: int, mode: int
) -> None:
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "report.md", "# report\n")
        atomic_write_json(tmp_path / "report.json", {"a": 1})
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
    finally:
        os.umask(old)
    for name in ("report.md", "report.json", "plain.txt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name
    assert (tmp_path / "report.md").read_text() == "# report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt", "report.json", "report.md"]
