"""Generated bad input (hypothesis): malformed recipes, hosts files and run directories never
reach an internal error.

A valid recipe, hosts file or finished run directory is mutated (values of the wrong type,
infinite or NaN floats, negative and huge integers, unknown keys, nesting far too deep, keys
removed, bytes flipped, truncated or replaced), and every command that reads it must hold the
contract: exit code 0 or 2; on 2, stderr ends with one ``error:`` line and holds no traceback;
nothing is written where the command must not write; and no process of a run is started.
Deterministic (``derandomize``) and sized to run in well under a minute."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from edgetrain import tomlconfig
from edgetrain.recipe import recipe_model
from tests.helpers.cli import plain_errors, run_cli
from tests.helpers.run_files import write_run


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


RECIPE: dict[str, Any] = {
    "run": {"name": "fuzz", "seed": 0, "checkpoint_every": 0},
    "data": {"dataset": "digits", "partition": "iid"},
    "model": {"name": "mlp", "options": {"hidden": [8]}},
    "train": {"family": "gossip", "technique": "gosgd", "epochs": 1, "lr": 0.05},
    "gossip": {"probability": 0.25},
    "workers": [{"count": 2, "labels": ["fast"]}],
}

HOSTS: dict[str, Any] = {
    "connect_timeout_s": 5,
    "hosts": [
        {"name": "edge-a", "address": "10.0.0.1", "workers": 1, "labels": ["fast"]},
        {"name": "edge-b", "address": "10.0.0.2", "workers": 1, "port": 22},
    ],
}

# Words that are right somewhere in a recipe: a mutation may turn a run into another family's,
# another dataset's or another device's, so deeper checks run too.
WORDS = [
    "synthetic",
    "mnist",
    "cifar10",
    "dirichlet",
    "fractions",
    "cuda",
    "auto",
    "adam",
    "ps",
    "pipeline",
    "dlion",
    "gaia",
    "mercury",
    "edgegossip",
    "dynacomm",
    "mcpipe",
    "server",
    "stage",
    "trainer",
    "curve",
    "localhost",
    "resnet18",
    "lenet5",
    "",
    "a/b",
    "../../x",
]
# Integers at the edges: 64-bit limits, 32-bit limits, zero and around it (no mid-size values:
# a schema bound that lets one through would make a test allocate or loop for real).
EDGE_INTS = [-(2**63), -(2**31), -1, 0, 1, 2, 3, 2**31, 2**32, 2**62, 2**63 - 1]


# Values TOML can spell but :func:`tomlconfig.dumps` will not write (it keeps to 64-bit
# integers, and it recurses): written as placeholders, replaced in the text.
BIG, DEEP = "@@big@@", "@@deep@@"
_SPELLED = {f'"{BIG}"': "99999999999999999999999", f'"{DEEP}"': "[" * 3000 + "]" * 3000}


def _deep(depth: int, table: bool) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value} if table else [value]
    return value


# Mostly values of a plausible kind at a bad edge (a recipe's keys are mostly numbers), then
# wrong kinds, words that are right elsewhere, and anything.
scalars = st.one_of(
    st.sampled_from(EDGE_INTS),
    st.sampled_from([math.inf, -math.inf, math.nan]),
    st.booleans(),
    st.sampled_from([*WORDS, BIG, DEEP]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
)
values = st.one_of(
    st.sampled_from(EDGE_INTS),
    st.sampled_from([math.inf, -math.inf, math.nan, -0.0, 1e308, 5e-324]),
    st.booleans(),
    st.sampled_from([*WORDS, BIG, DEEP]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.lists(scalars, max_size=3),
    st.dictionaries(st.sampled_from(["a", "count", "seed", "x"]), scalars, max_size=2),
    st.builds(_deep, st.integers(33, 200), st.booleans()),
)


def _field_paths() -> list[tuple[Any, ...]]:
    """Every key a recipe may hold: each section's fields (``[[workers]]``' in its first
    group), so a mutation can reach every section's validation."""
    paths: list[tuple[Any, ...]] = []
    for name in recipe_model().model_fields:
        inner = tomlconfig.model_at(recipe_model(), (name,))
        if inner is None:
            continue
        where: tuple[Any, ...] = (name, 0) if name == "workers" else (name,)
        paths += [(*where, key) for key in inner.model_fields]
    return paths


FIELD_PATHS = _field_paths()
CORE = ("run", "data", "model", "train", "workers", "gossip")
TABLE_PATHS = [("run",), ("data",), ("model",), ("train",), ("gossip",), ("workers", 0), ()]


def _container(doc: Any, path: tuple[Any, ...]) -> Any:
    """The table or array at ``path``, made where missing (a table replaced by a scalar is
    replaced back by a table)."""
    for part in path:
        nxt = doc[part] if isinstance(doc, list) else doc.get(part)
        if not isinstance(nxt, (dict, list)):
            nxt = {}
            if isinstance(doc, list):
                doc[part] = nxt
            else:
                doc[part] = nxt
        doc = nxt
    return doc


@st.composite
def mutations(draw: st.DrawFn, fields: list[tuple[Any, ...]], tables: list[tuple[Any, ...]]) -> Any:
    kind = draw(st.sampled_from(["set"] * 5 + ["unknown", "delete", "section"]))
    if kind in ("set", "delete"):  # half the time a key of the sections the recipe has
        core = [f for f in fields if f[0] in CORE] or fields
        return kind, draw(st.sampled_from(draw(st.sampled_from([core, fields])))), draw(values)
    if kind == "unknown":
        key = draw(st.sampled_from(["epoch", "sed", "x", "", "ünï", "a.b", "[x]"]))
        return kind, (*draw(st.sampled_from(tables)), key), draw(values)
    return kind, draw(st.sampled_from(tables[:-1])), draw(values)


def _apply(doc: dict[str, Any], mutation: Any) -> None:
    kind, path, value = mutation
    if kind == "section":  # a whole table becomes a value
        parent = _container(doc, path[:-1])
        parent[path[-1]] = value
        return
    parent = _container(doc, path[:-1])
    key = path[-1]
    if kind == "delete":
        if isinstance(parent, dict):
            parent.pop(key, None)
        return
    if isinstance(parent, list):
        if isinstance(key, int) and key < len(parent):
            parent[key] = value
        return
    parent[key] = value


def _mutated(base: dict[str, Any], muts: list[Any]) -> str:
    doc = json.loads(json.dumps(base))
    for m in muts:
        _apply(doc, m)
    text = tomlconfig.dumps(doc)
    for placeholder, spelled in _SPELLED.items():
        text = text.replace(placeholder, spelled)
    return text


def _same_kinds(written: Any, read: Any, where: str = "") -> None:
    """What validation accepted keeps the kind it was written as: no ``true`` read as 1.0,
    no "0.1" as 0.1 (an integer may stand for a float), and every float is finite."""
    if isinstance(read, float):
        assert math.isfinite(read), f"{where} = {read} was accepted"
    if isinstance(written, dict) and isinstance(read, dict):
        for k in written.keys() & read.keys():
            _same_kinds(written[k], read[k], f"{where}.{k}")
    elif isinstance(written, list) and isinstance(read, list) and len(written) == len(read):
        for i, (w, r) in enumerate(zip(written, read, strict=True)):
            _same_kinds(w, r, f"{where}.{i}")
    elif isinstance(written, bool) or isinstance(read, bool):
        assert type(written) is type(read), f"{where}: {written!r} was read as {read!r}"
    elif isinstance(written, (int, float)):
        assert isinstance(read, (int, float)), f"{where}: {written!r} was read as {read!r}"
    elif isinstance(written, str):
        assert isinstance(read, str), f"{where}: {written!r} was read as {read!r}"


def _runnable(path: Path) -> None:
    """A recipe ``check`` accepted goes to the workers as it would: in strict JSON (the
    coordinator's ``welcome``) and as TOML (the run's recipe.toml), read back equal, and its
    seed seeds numpy and torch as a worker seeds them."""
    import numpy as np
    import torch

    from edgetrain.recipe import load_recipe, parse_recipe

    recipe, _ = load_recipe(path, check_paths=False)
    written = tomlconfig.loads(path.read_text())
    _same_kinds(written, recipe.model_dump(mode="python"))
    sent = json.loads(json.dumps(recipe.to_dict(), allow_nan=False))
    assert parse_recipe(sent) == recipe
    assert parse_recipe(tomlconfig.loads(recipe.to_toml())) == recipe
    np.random.default_rng([recipe.run.seed, 0, 0])
    torch.Generator().manual_seed(recipe.run.seed)


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for p in root.rglob("*"):
        st_ = p.lstat()
        out[str(p.relative_to(root))] = (st_.st_size if p.is_file() else 0, st_.st_mtime_ns)
    return out


def _holds(code: int, err: str, argv: tuple[str, ...]) -> None:
    """The contract: 0 or 2, and on 2 one ``error:`` line at the end, no traceback."""
    assert code in (0, 2), f"{argv}: exit {code}: {err[-500:]}"
    assert "Traceback" not in err and "internal error" not in err, f"{argv}: {err[-500:]}"
    if code == 2:  # a --format json error line read as the text one
        lines = plain_errors(err).strip().splitlines()
        assert lines and lines[-1].startswith("error: "), f"{argv}: {err[-500:]}"


def _ours(argv: Any) -> bool:
    words = [str(a) for a in (argv if isinstance(argv, (list, tuple)) else [argv])]
    first = Path(words[0]).name if words else ""
    return (
        first.startswith(("python", "ssh", "scp", "rsync", "sh", "bash"))
        or any("edgetrain" in w for w in words)
        or words[:1] == [sys.executable]
    )


@pytest.fixture()
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh current directory, and no run's process may start (ssh, a worker); hosts are
    never contacted (``hosts check`` gets no facts, ssh aliases are not resolved)."""
    import edgetrain.launch.hostinfo
    import edgetrain.launch.ssh

    start = subprocess.Popen.__init__

    def refuse(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        if _ours(args):
            raise AssertionError(f"a process was started: {args}")
        start(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(edgetrain.launch.hostinfo, "check", lambda hosts: [])
    monkeypatch.setattr(edgetrain.launch.ssh, "resolve_hosts", lambda hosts: hosts)
    monkeypatch.chdir(tmp_path)
    return tmp_path


recipe_mutations = st.lists(mutations(FIELD_PATHS, TABLE_PATHS), min_size=1, max_size=2)


@_settings(150)
@given(muts=recipe_mutations)
def test_check_and_data_inspect_hold_on_a_malformed_recipe(
    capsys: pytest.CaptureFixture[str], here: Path, muts: list[Any]
) -> None:
    (here / "r.toml").write_text(_mutated(RECIPE, muts))
    before = _tree(here)
    for argv in (("check", "r.toml"), ("data", "inspect", "r.toml")):
        code, _, err = run_cli(capsys, *argv)
        _holds(code, err, argv)
        assert _tree(here) == before, f"{argv} wrote something"
        event(f"{argv[0]}: exit {code}")
        if argv[0] == "check" and code == 0:
            _runnable(here / "r.toml")


HOST_FIELDS = [
    *(
        ("hosts", 0, key)
        for key in (
            "name",
            "address",
            "user",
            "port",
            "workers",
            "labels",
            "memory",
            "python",
            "site",
            "bind",
            "identity",
        )
    ),
    *((key,) for key in ("coordinator", "bind", "ssh_options", "python", "connect_timeout_s")),
]
HOST_TABLES = [("hosts", 0), ("hosts", 1), ()]


@_settings(60)
@given(muts=st.lists(mutations(HOST_FIELDS, HOST_TABLES), min_size=1, max_size=3))
def test_hosts_readers_hold_on_a_malformed_hosts_file(
    capsys: pytest.CaptureFixture[str], here: Path, muts: list[Any]
) -> None:
    (here / "r.toml").write_text(_mutated(RECIPE, []))
    (here / "hosts.toml").write_text(_mutated(HOSTS, muts))
    before = _tree(here)
    for argv in (
        ("check", "r.toml", "--hosts", "hosts.toml"),
        ("hosts", "check", "--hosts", "hosts.toml"),
    ):
        code, _, err = run_cli(capsys, *argv)
        _holds(code, err, argv)
        assert _tree(here) == before, f"{argv} wrote something"


RUN_FILES = [
    "manifest.json",
    "metrics/coordinator.jsonl",
    "metrics/worker-0.jsonl",
    "report/summary.json",
]


@st.composite
def damage(draw: st.DrawFn) -> tuple[str, str, Any]:
    """Which file of a run, and how it is damaged."""
    name = draw(st.sampled_from(RUN_FILES))
    how = draw(st.sampled_from(["flip", "flip", "truncate", "insert", "replace", "json"]))
    if how == "json":
        key = draw(
            st.sampled_from(
                [
                    "workers",
                    "recipe",
                    "attempts",
                    "name",
                    "run_id",
                    "status",
                    "seed",
                    "wall_s",
                    "start_time",
                    "launcher_pid",
                    "extended_epochs",
                    "family",
                    "technique",
                    "workers.0",
                    "workers.0.id",
                    "workers.0.role",
                    "recipe.train",
                    "recipe.model",
                    "recipe.train.epochs",
                    "attempts.0",
                ]
            )
        )
        return "manifest.json", how, (key, draw(values))
    if how == "flip":
        spots = st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255))
        return name, how, draw(st.lists(spots, min_size=1, max_size=8))
    if how == "insert":
        return name, how, (draw(st.floats(0, 1)), draw(st.binary(min_size=1, max_size=16)))
    if how == "truncate":
        return name, how, draw(st.floats(0, 1))
    return name, how, draw(st.binary(max_size=64))


def _set_key(doc: dict[str, Any], dotted: str, value: Any) -> None:
    parts: list[Any] = [int(p) if p.isdigit() else p for p in dotted.split(".")]
    node: Any = doc
    for part in parts[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return
    try:
        node[parts[-1]] = value
    except (IndexError, TypeError):
        return


def _damage(run: Path, spec: tuple[str, str, Any]) -> None:
    name, how, arg = spec
    path = run / name
    data = bytearray(path.read_bytes())
    if how == "json":
        doc = json.loads(data)
        _set_key(doc, *arg)
        data = bytearray(json.dumps(doc, allow_nan=True).encode())
    elif how == "flip":
        for where, byte in arg:
            if data:
                data[int(where * len(data))] = byte
    elif how == "insert":
        at = int(arg[0] * len(data))
        data[at:at] = arg[1]
    elif how == "truncate":
        del data[int(arg * len(data)) :]
    else:
        data = bytearray(arg)
    path.write_bytes(bytes(data))


@pytest.fixture()
def finished(here: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A finished run with its report written once (its summary.json is there to damage)."""
    run = write_run(here / "template")
    code, _, err = run_cli(capsys, "report", str(run), "--format", "json")
    assert code == 0, err
    return run


_example = count()


@_settings(50)
@given(spec=damage())
def test_run_readers_hold_on_a_damaged_run_directory(
    capsys: pytest.CaptureFixture[str], here: Path, finished: Path, spec: tuple[str, str, Any]
) -> None:
    root = here / f"runs-{next(_example)}"
    run = root / finished.name
    shutil.copytree(finished, run)
    _damage(run, spec)
    before = _tree(root)
    for argv in (
        ("status", str(run)),
        ("runs", "--runs-root", str(root)),
        ("compare", str(run), str(run), "--format", "json"),
    ):
        code, _, err = run_cli(capsys, *argv)
        _holds(code, err, argv)
        assert _tree(root) == before, f"{argv} wrote something"
    code, _, err = run_cli(capsys, "report", str(run), "--format", "json")
    _holds(code, err, ("report",))
    after = _tree(root)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    if code == 2:
        assert not changed, f"a failed report wrote {sorted(changed)}"
    else:  # report writes its own folder, and nothing else
        assert all(k.startswith(f"{run.name}/report") for k in changed), sorted(changed)
    shutil.rmtree(root)
