"""A reproduction's profile is the fastest of a few tries: interference only ever slows a
measurement down. Pure parts against literal documents, and the tries against a fake host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgetrain.experiment.beds import Bed, BedSpec
from edgetrain.experiment.profiling import fastest, profile_in_host, step_of


def test_the_fastest_sustained_step_wins_and_every_try_is_kept() -> None:
    docs = [
        {"step_s": 0.0118, "sustained_step_s": 0.0172, "n": 1},  # read slow: a busy machine
        {"step_s": 0.0082, "sustained_step_s": 0.0124, "n": 2},
        {"step_s": 0.0080, "sustained_step_s": 0.0130, "n": 3},  # a faster burst, slower pace
    ]
    best = fastest(docs)
    assert best["n"] == 2 and best["tries_step_s"] == [0.0172, 0.0124, 0.0130]
    assert "tries_step_s" not in fastest(docs[:1])  # one try: the profile as it came
    assert step_of({"step_s": 0.01}) == 0.01 and step_of({}) == float("inf")
    with pytest.raises(ValueError):
        fastest([])


def test_profile_in_host_runs_the_tries_and_keeps_the_fastest(tmp_path: Path) -> None:
    # a stand-in for `edgetrain profile`: each run prints the next of three documents
    counter = tmp_path / "n"
    script = tmp_path / "fake.py"
    script.write_text(
        "import json, pathlib, sys\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(n + 1))\n"
        "print(json.dumps({'sustained_step_s': [0.02, 0.01, 0.03][n], 'n': n}))\n"
    )
    bed = Bed(BedSpec("local"))  # local processes: this interpreter runs the argv
    said: list[str] = []
    path = tmp_path / "profiles" / "m.json"
    doc = profile_in_host(bed, "local", [str(script)], path, said.append, "m", tries=3)
    assert doc["n"] == 1 and doc["tries_step_s"] == [0.02, 0.01, 0.03]
    assert json.loads(path.read_text())["n"] == 1 and len(said) == 1
    again = profile_in_host(bed, "local", [str(script)], path, said.append, "m", tries=3)
    assert again == doc and counter.read_text() == "3"  # kept: never measured again
