"""The one TOML writer (``tomlconfig.dumps``): what it writes reads back equal through
``tomllib``, whatever the strings, numbers, tables and arrays of tables; what TOML cannot say is
refused; the hosts writer and a reproduction's recipe templates go through it."""

from __future__ import annotations

import datetime
import math
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.launch.hosts import parse_hosts, to_toml
from edgetrain.recipe import load_recipe, parse_recipe
from edgetrain.tomlconfig import dumps, inline, recipe_toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package
    import tomli as tomllib

AWKWARD = [
    "",
    'say "hi"',
    "back\\slash and C:\\path\\to\\file",
    "a\nnew line, a\ttab, a\r\nCRLF",
    "bell \x07, NUL \x00, unit separator \x1f, DEL \x7f, backspace \b, form feed \f",
    "é ü ß — “curly” 中文 日本語 🙂 \u2028 \u200f rtl",
    "\"\"\"triple\"\"\" and '''single'''",
    'key = "value"\n[table]\n[[array]]',
    "{seed} {{braces}}",
    "\\u0041 is not an escape here",
]


def roundtrip(doc: dict[str, Any]) -> dict[str, Any]:
    return tomllib.loads(dumps(doc))


@pytest.mark.parametrize("text", AWKWARD)
def test_awkward_strings_read_back_equal(text: str) -> None:
    doc = {"s": text, "list": [text, text], "t": {"s": text}, "rows": [{"s": text}]}
    assert roundtrip(doc) == doc


@pytest.mark.parametrize("key", ["key with space", "a.b", "", "ünï", 'q"uote', "back\\slash", "1"])
def test_keys_that_need_quotes(key: str) -> None:
    doc = {key: 1, "table": {key: {key: [{key: True}]}}}
    assert roundtrip(doc) == doc


def test_numbers_bools_and_dates() -> None:
    doc = {
        "ints": [0, -1, 2**63 - 1, -(2**63)],
        "floats": [0.1, -0.0, 1e-7, 1e300, 5e-324, 1 / 3, 1e16],
        "bools": [True, False],
        "when": datetime.datetime(2026, 11, 25, 8, 30, 1, 5, tzinfo=datetime.timezone.utc),
        "day": datetime.date(2026, 11, 25),
        "clock": datetime.time(8, 30),
    }
    assert roundtrip(doc) == doc
    got = roundtrip({"inf": math.inf, "ninf": -math.inf, "nan": math.nan})
    assert got["inf"] == math.inf and got["ninf"] == -math.inf and math.isnan(got["nan"])


def test_a_decimal_is_a_float_written_with_its_digits() -> None:
    text = dumps({"slowdown": Decimal("3.0000"), "whole": Decimal("2"), "e": Decimal("1E-7")})
    assert "slowdown = 3.0000\n" in text and "whole = 2.0\n" in text
    assert tomllib.loads(text) == {"slowdown": 3.0, "whole": 2.0, "e": 1e-7}
    assert math.isnan(tomllib.loads(dumps({"x": Decimal("NaN")}))["x"])


def test_tables_and_arrays_of_tables() -> None:
    doc = {
        "name": "bed",
        "run": {"name": "arm", "seed": 1, "options": {"hidden": [256, 256]}},
        "empty": {},
        "only_tables": {"inner": {"x": 1}},
        "workers": [
            {"count": 2, "env": {"A": "1", "B": "two"}},
            {"host": "localhost", "slowdown": 1.5, "labels": ["gpu", "fast"]},
            {},
        ],
        "sites": [
            {"name": "s1", "hosts": [{"name": "h1", "cpu": 0.7}, {"name": "h2", "cpu": 0.5}]},
            {"name": "s2", "hosts": [{"name": "h3", "cpu": 0.3}]},
        ],
        "mixed": [1, "two", [3.0, [4]], {"inline": {"deep": True}}],
        "no_rows": [],
    }
    text = dumps(doc)
    assert roundtrip(doc) == doc
    assert text.count("[[workers]]") == 3 and text.count("[[sites.hosts]]") == 3
    assert "[workers.env]" in text and "[only_tables]" not in text  # implied by its table
    assert text.index("name = ") < text.index("[run]")  # plain keys before any table


def test_what_toml_cannot_say_is_refused() -> None:
    with pytest.raises(TypeError, match="run.seed is None: TOML has no null"):
        dumps({"run": {"seed": None}})
    with pytest.raises(ValueError, match="does not fit"):
        dumps({"n": 2**63})
    with pytest.raises(TypeError, match="has no TOML spelling"):
        dumps({"x": object()})
    with pytest.raises(TypeError, match="TOML keys are strings"):
        dumps({1: "x"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="no UTC offset"):
        dumps({"t": datetime.time(8, tzinfo=datetime.timezone.utc)})


def test_paths_and_tuples() -> None:
    assert roundtrip({"p": Path("/a b/c\\d"), "t": (1, 2)}) == {"p": "/a b/c\\d", "t": [1, 2]}
    assert inline({"a": [1, "x"]}) == '{ a = [1, "x"] }' and inline({}) == "{}"


SCALARS = (
    st.text()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.booleans()
)
DOCS = st.recursive(
    st.dictionaries(st.text(), SCALARS, max_size=4),
    lambda inner: st.dictionaries(
        st.text(),
        SCALARS | inner | st.lists(inner, max_size=3) | st.lists(SCALARS, max_size=3),
        max_size=4,
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(DOCS)
def test_any_document_reads_back_equal(doc: dict[str, Any]) -> None:
    assert roundtrip(doc) == doc


def test_hosts_files_are_written_by_the_same_writer() -> None:
    hosts = parse_hosts(
        {
            "python": 'C:\\Program Files\\py "3"\\python.exe',
            "hosts": [
                {"address": "10.0.0.1", "workdir": '/tmp/dir with "quotes"\n', "workers": 2},
                {"address": "10.0.0.2", "labels": ["gpu", "é"], "memory": 1024},
            ],
        },
        "x",
    )
    assert parse_hosts(tomllib.loads(to_toml(hosts)), "x") == hosts


def test_a_recipe_reads_back_equal(tmp_path: Path) -> None:
    recipe, _ = load_recipe(Path(__file__).resolve().parents[1] / "recipes" / "quickstart.toml")
    again = tmp_path / "again.toml"
    again.write_text(recipe_toml(recipe))
    assert load_recipe(again)[0] == recipe
    as_read = tomllib.loads(
        (Path(__file__).resolve().parents[1] / "recipes" / "quickstart.toml").read_text()
    )
    assert parse_recipe(tomllib.loads(recipe_toml(as_read))) == recipe


def test_a_reproduction_recipe_template_keeps_seed_and_braces() -> None:
    from edgetrain.errors import RecipeError
    from edgetrain.experiment import recipes

    root = '/data/"quoted" {host}\\dir\n'
    data = {"dataset": "mnist", "root": root, "test_split": 0.2}
    train = {"family": "gossip", "technique": "gosgd", "epochs": 2, "batch_size": 16, "lr": 0.05}
    text = recipes.recipe("arm-one", data, "mlp", train, [{"count": 2}], {"gossip": {}})
    filled = tomllib.loads(text.format(seed=7))
    assert filled["run"] == {
        "name": "arm-one",
        "seed": 7,
        "checkpoint_every": 0,
        "heartbeat_s": 2.0,
    }
    assert filled["data"]["root"] == root and filled["train"] == train
    with pytest.raises(RecipeError, match="workers"):
        recipes.template({"run": {"name": "x"}, "workers": []})  # a recipe needs workers


def test_every_shipped_recipe_writes_itself_and_loads_back_equal() -> None:
    from edgetrain.recipe import load_recipe, parse_recipe
    from edgetrain.tomlconfig import loads
    from tests.helpers.paths import REPO

    for path in sorted((REPO / "recipes").glob("*.toml")):
        recipe, _ = load_recipe(path)
        assert parse_recipe(loads(recipe.to_toml())) == recipe, path.name
