"""Paths the tests share: the repository and its recipes."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
TESTBEDS = RECIPES / "testbeds"
