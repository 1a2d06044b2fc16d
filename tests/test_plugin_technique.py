"""A technique plugs into an existing family through the registry alone
(tests/helpers/annealgossip.py: its module, its section, one registry line): it is listed,
its section validates, its check refuses in one line, and it trains with its own runner and
report over the gossip family's policy, drain accounting and averaged model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.launching import completed
from tests.helpers.paths import REPO

PLUGIN = "tests.helpers.annealgossip"

RECIPE = """
[run]
name = "anneal"
[data]
dataset = "digits"
[train]
family = "gossip"
technique = "anneal"
epochs = 3
batch_size = 32
[gossip]
probability = {probability}
[anneal]
decay = 0.5
[[workers]]
count = 2
"""


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "EDGETRAIN_PLUGINS": PLUGIN, "PYTHONPATH": path}


def _recipe(tmp_path: Path, probability: float) -> Path:
    path = tmp_path / "anneal.toml"
    path.write_text(RECIPE.format(probability=probability))
    return path


def _edgetrain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgetrain", *args],
        capture_output=True, text=True, timeout=120, env=_env(), check=False,
    )  # fmt: skip


def test_the_registry_lists_a_plugin_technique_on_a_built_in_family() -> None:
    out = _edgetrain("techniques", "--format", "json")
    assert out.returncode == 0, out.stderr
    gossip = {f["family"]: f for f in json.loads(out.stdout)}["gossip"]
    names = [t["name"] for t in gossip["techniques"]]
    assert names[:5] == ["gosgd", "edgegossip", "dlion", "gaia", "ako"] and "anneal" in names
    assert "anneal" in gossip["sections"]
    anneal = next(t for t in gossip["techniques"] if t["name"] == "anneal")
    assert anneal["side"] == f"{PLUGIN}:SIDE" and anneal["sections"] == ["gossip", "anneal"]


def test_a_plugin_techniques_check_refuses_in_one_line(tmp_path: Path) -> None:
    out = _edgetrain("launch", str(_recipe(tmp_path, 0.0)), "--runs-root", str(tmp_path / "r"))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "[gossip] probability = 0 pushes never" in out.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.timeout(180)
def test_a_plugin_technique_trains_on_the_gossip_family(tmp_path: Path) -> None:
    launch, summary = completed(_recipe(tmp_path, 0.5), tmp_path / "runs", env=_env())
    assert (summary["family"], summary["technique"]) == ("gossip", "anneal")
    # the family's averaged model (its final_model hook) and a sane accuracy on digits
    assert summary["averaged_test_accuracy"] is not None
    assert summary["averaged_test_accuracy"] > 0.8
    # the technique's own report over the family's: each epoch's probability, halving
    own = summary["technique_report"]
    assert own["anneal"]["probability"] == {"1": 0.5, "2": 0.25, "3": 0.125}
    assert len(own["epochs"]) == 3  # the family's spread table is still there
    md = (launch.run_dir / "report" / "summary.md").read_text()
    assert "Anneal: push probability per epoch" in md
    assert "Gossip: finish-time spread per epoch" in md
