"""What a launch into RUN reads of the files other commands left there: literal tables."""

from __future__ import annotations

from pathlib import Path

import tomllib

from edgetrain.launch.run_inputs import classify, run_dir_files
from edgetrain.recipe import parse_recipe
from edgetrain.runtime.side import launcher_side


def test_files_the_technique_names_are_used_and_the_rest_ignored() -> None:
    files = ["data/aggregates-0.npz", "plans/vm.json", "profiles/vm.json"]
    got = classify(files, {"./plans/vm.json": "[ps] plan"})
    assert got.used == {"plans/vm.json": "[ps] plan"}
    assert got.ignored == ["data/aggregates-0.npz", "profiles/vm.json"]
    assert got.lines("ps/dynacomm") == [
        "uses from the run directory: plans/vm.json ([ps] plan)",
        "ignores from the run directory: data/aggregates-0.npz, profiles/vm.json "
        "(ps/dynacomm reads only [ps] plan)",
    ]
    assert got.to_dict() == {
        "used": [{"path": "plans/vm.json", "key": "[ps] plan"}],
        "ignored": ["data/aggregates-0.npz", "profiles/vm.json"],
    }


def test_nothing_read_and_many_ignored_is_said_in_one_line() -> None:
    files = [f"data/aggregates-{i}.npz" for i in range(6)]
    got = classify(files, {})
    assert got.lines("gossip/gosgd", shown=2) == [
        "ignores from the run directory: data/aggregates-0.npz, data/aggregates-1.npz and 4 "
        "more (gossip/gosgd reads none of them)"
    ]
    assert classify([], {}).lines("gossip/gosgd") == []


def test_run_dir_files_lists_what_other_commands_write(tmp_path: Path) -> None:
    for rel in ("profiles/h.json", "plans/h.json", "data/aggregates-all.npz", "plans/.h.tmp"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    (tmp_path / "manifest.json").write_text("{}")
    assert run_dir_files(tmp_path) == [
        "data/aggregates-all.npz",
        "plans/h.json",
        "profiles/h.json",
    ]


RECIPE = """
[data]
dataset = "digits"
[train]
family = "{family}"
technique = "{technique}"
{section}
[[workers]]
role = "{first}"
count = 1
[[workers]]
role = "{second}"
count = 2
"""


def _reads(family: str, technique: str, section: str, roles: tuple[str, str]) -> dict[str, str]:
    text = RECIPE.format(
        family=family, technique=technique, section=section, first=roles[0], second=roles[1]
    )
    recipe = parse_recipe(tomllib.loads(text))
    return launcher_side(family, technique).reads(recipe)


def test_each_family_names_the_files_it_reads() -> None:
    ps = ("server", "trainer")
    assert _reads("ps", "dynacomm", '[ps]\nplan = "plans/vm.json"', ps) == {
        "plans/vm.json": "[ps] plan"
    }
    assert _reads("ps", "dynacomm", "", ps) == {}
    stages = ("stage", "stage")
    assert _reads("pipeline", "mcpipe", '[pipeline]\nplan = "plans/p.json"', stages) == {
        "plans/p.json": "[pipeline] plan"
    }
    trainers = ("trainer", "trainer")
    assert _reads("gossip", "gosgd", "", trainers) == {}
