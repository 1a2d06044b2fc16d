"""The technique is the unit: no module outside a technique's own (its runner's and side's
modules, and a package of its own) and the registry tests technique names or keeps a list of
them, sections are read typed, and every section model's ``NAME`` is the name its registry
entry gives it. Checked on the source. (The paper reproductions, outside the package, name
the techniques they run.)"""

from __future__ import annotations

import ast
from pathlib import Path

from edgetrain import techniques
from tests.helpers.paths import REPO

PACKAGE = REPO / "edgetrain"
REGISTRY = {PACKAGE / "techniques.py", PACKAGE / "recipe.py"}
NAMES = {t for fam in techniques.FAMILIES.values() for t in fam.techniques}


def _module_file(target: str) -> Path:
    module = target.partition(":")[0]
    base = REPO.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _own_files() -> set[Path]:
    """Each technique's runner and side modules, and every module of a package below its
    family's that holds one of them (``ps/mercury/``)."""
    own: set[Path] = set()
    for fam in techniques.FAMILIES.values():
        root = PACKAGE / fam.name
        for spec in fam.techniques.values():
            for target in (spec.runner, spec.side):
                if target is None:
                    continue
                path = _module_file(target)
                own.add(path)
                if path.parent != root and root in path.parents:
                    own.update(path.parent.rglob("*.py"))
    return own


def _reads_technique(node: ast.expr) -> bool:
    """An expression that reads a technique: ``recipe.train.technique``, ``technique``,
    ``tech``, ``manifest.get("technique")``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "technique"
    if isinstance(node, ast.Name):
        return node.id in ("technique", "tech")
    if isinstance(node, ast.Call):
        args = node.args
        return bool(args) and isinstance(args[0], ast.Constant) and args[0].value == "technique"
    return False


def _name_list(node: ast.expr) -> bool:
    """A tuple, list or set literal holding two or more technique names."""
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return False
    return sum(isinstance(e, ast.Constant) and e.value in NAMES for e in node.elts) >= 2


def _registry_lookup(node: ast.expr) -> bool:
    """``... in fam.techniques``: asking the registry, not testing a name."""
    return isinstance(node, ast.Attribute) and node.attr == "techniques"


def _tests_of(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = (node.left, *node.comparators)
            ops_ok = all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
            if any(_registry_lookup(e) for e in operands):
                continue
            if ops_ok and any(_reads_technique(e) or _name_list(e) for e in operands):
                lines.append(node.lineno)
        elif isinstance(node, ast.Assign) and _name_list(node.value):
            lines.append(node.lineno)  # a list of technique names kept outside the registry
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and _reads_technique(node.func.value)
        ):
            lines.append(node.lineno)
    return lines


def test_no_module_but_a_techniques_own_and_the_registry_tests_technique_names() -> None:
    allowed = _own_files() | REGISTRY
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in allowed:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        problems += [f"{path.relative_to(REPO)}:{line}" for line in _tests_of(tree)]
    assert problems == []


def test_the_check_sees_a_technique_test() -> None:
    """The scan itself: each form it must catch, and a comparison it must leave alone."""
    caught = [
        'if recipe.train.technique == "x": pass',
        "if technique in MERCURY: pass",
        'if tech == "local": pass',
        'edge = manifest.get("technique") == "edgegossip"',
        'ok = name in ("dlion", "gaia")',
        'EXCHANGE = ("dlion", "gaia", "ako")',
        'ok = recipe.train.technique.startswith("multi")',
    ]
    for source in caught:
        assert _tests_of(ast.parse(source)) == [1], source
    for source in (
        'ok = scheduler == "bacc"',
        'ok = testbed == "local"',
        "ok = t in fam.techniques",
    ):
        assert _tests_of(ast.parse(source)) == [], source


def test_no_call_site_reads_a_section_by_its_name() -> None:
    """Sections are read typed (``PsSection.of(recipe)``), not ``recipe.section("ps", ...)``."""
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in (PACKAGE / "recipe.py", PACKAGE / "section.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "section"
            ):
                problems.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert problems == []


def test_every_section_model_is_named_as_its_registry_entry_names_it() -> None:
    for fam in techniques.FAMILIES.values():
        for name, target in fam.sections.items():
            assert name == techniques.resolve(target).NAME, (fam.name, name, target)
