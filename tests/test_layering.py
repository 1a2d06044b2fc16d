"""The package layers (review §2.3 and issue 26): every top-level package or module of
``edgetrain`` sits on its own rung of a ladder, and nothing imports a higher rung; the runtime
and the control plane never name a family, and a family names no other family; and no two
modules import each other, directly or round a circle. Checked on the source, import by import:
lazy (function-local) and ``TYPE_CHECKING`` imports count as much as top-level ones."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.paths import REPO

PACKAGE = REPO / "edgetrain"

# Lowest first, one top-level package or module per rung: a module may import its own package
# and those on lower rungs. A name whose package does not exist (yet, or any more) is fine.
LAYERS: list[str] = [
    "__init__",  # the package itself: __version__
    "errors",
    "envinfo",
    "rundir",
    "tomlconfig",
    "sizes",
    "cgroups",
    "techniques",
    "recipe",
    "section",  # the base of the families' recipe sections (Section.of reads a Recipe)
    "comm",
    "checkpoints",  # run checkpoints of hand-ins: over comm's contracts; only launch uses them
    "models",
    "data",
    "plan",
    "profile",
    "runtime",
    "aggregate",
    "gossip",
    "ps",
    "pipeline",
    "worker",
    "report",
    "launch",
    "emulate",  # builds testbeds for launch: writes hosts files, reaches hosts over its ssh
    "advise",  # every technique's cost model on hosts and links; profiles hosts over ssh
    "experiment",  # the library under the paper reproductions (reproductions/, outside)
    "cli",
    "__main__",
]
# A package being replaced shares its successor's rung until it is gone; the test below fails
# once it is gone, so that its name is removed from here too.
FAMILIES = {"gossip", "ps", "pipeline"}
PLATFORM = {"comm", "runtime", "worker", "launch"}  # the runtime and the control plane


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _module_of(path: Path) -> str:
    return next(name for name, p in MODULES.items() if p == path)


def _known(name: str) -> str | None:
    """``name`` or its longest prefix that is a module of the package, or None (outside)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in MODULES:
            return ".".join(parts)
        parts.pop()
    return None


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for each package module ``path`` imports, wherever the import stands
    (module level, inside a function, under ``if TYPE_CHECKING``). ``from pkg import mod`` is
    the module ``pkg.mod`` when ``mod`` is one, else ``pkg``; relative imports are resolved."""
    own = _module_of(path)
    here = own if path.name == "__init__.py" else own.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name)
                if target is not None:
                    yield node.lineno, target
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                target = _known(base if alias.name == "*" else f"{base}.{alias.name}")
                if target is not None:
                    yield node.lineno, target


def _top(module: str) -> str:
    """The top-level package or module of ``edgetrain.x.y`` (``__init__`` for the package)."""
    parts = module.split(".")
    if len(parts) > 1:
        return parts[1]
    return "__init__"


def _own_top(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def _rung(name: str) -> int:
    if name not in LAYERS:
        raise AssertionError(f"edgetrain.{name} is on no rung: add it to LAYERS")
    return LAYERS.index(name)


def test_every_package_is_on_its_own_rung() -> None:
    assert len(set(LAYERS)) == len(LAYERS), "a name is on two rungs"
    tops = {_own_top(path) for path in MODULES.values()}
    missing = sorted(t for t in tops if t not in LAYERS)
    assert missing == [], f"edgetrain.{missing[0]} is on no rung: add it to LAYERS"


def test_no_module_imports_a_higher_layer_or_a_family_it_must_not_know() -> None:
    problems = []
    for path in MODULES.values():
        own = _own_top(path)
        for line, module in _imports(path):
            other = _top(module)
            if other == own:
                continue
            where = f"{path.relative_to(REPO)}:{line} imports {module}"
            if _rung(other) > _rung(own):
                problems.append(f"{where} (a higher layer)")
            if own in FAMILIES and other in FAMILIES | {"worker", "launch"}:
                problems.append(f"{where} (a family must not)")
            if own in PLATFORM and other in FAMILIES:
                problems.append(f"{where} (names a family)")
    assert problems == []


def _graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: the line of the first such import}."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in MODULES.items():
        edges = graph.setdefault(name, {})
        for line, target in _imports(path):
            if target != name:
                edges.setdefault(target, line)
    return graph


def _components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def _path(graph: dict[str, dict[str, int]], start: str, goal: str, inside: set[str]) -> list[str]:
    """A shortest import path from ``start`` to ``goal`` through ``inside`` (breadth first)."""
    came: dict[str, str] = {start: start}
    frontier = [start]
    while frontier and goal not in came:
        step = []
        for m in frontier:
            for n in sorted(graph[m]):
                if n in inside and n not in came:
                    came[n] = m
                    step.append(n)
        frontier = step
    path = [goal]
    while path[-1] != start:
        path.append(came[path[-1]])
    return path[::-1]


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Import cycles, each as modules in order (the first repeated at the end): for every
    import inside a strongly connected component, the shortest circle through it."""
    found: dict[tuple[str, ...], list[str]] = {}
    for members in _components(graph):
        inside = set(members)
        for a in members:
            for b in sorted(graph[a]):
                if b in inside:
                    circle = [a, *_path(graph, b, a, inside)]
                    first = circle.index(min(circle[:-1]))
                    ring = circle[first:-1] + circle[:first]
                    found.setdefault(tuple(ring), [*ring, ring[0]])
    return sorted(found.values())


def _show(graph: dict[str, dict[str, int]], circle: list[str]) -> str:
    steps = [
        f"{MODULES[a].relative_to(REPO)}:{graph[a][b]} -> {b}"
        for a, b in zip(circle, circle[1:], strict=False)
    ]
    return " | ".join(steps)


def test_the_cycle_finder_finds_a_circle_and_each_of_its_edges() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 1, "a": 2}, "c": {"a": 1}, "d": {"a": 1}}
    assert cycles(graph) == [["a", "b", "a"], ["a", "b", "c", "a"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycle_between_modules() -> None:
    graph = _graph()
    assert [_show(graph, c) for c in cycles(graph)] == []
