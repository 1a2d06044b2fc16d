"""The package layers (review §2.3): nothing imports a higher layer, and the runtime and the
control plane never name a family. Checked on the source, import by import."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.paths import REPO

PACKAGE = REPO / "edgetrain"

# lowest first; a module may import its own layer and those below
LAYERS: list[set[str]] = [
    {"errors", "rundir", "envinfo", "tomlconfig", "__init__"},
    {"techniques", "recipe"},
    {"comm"},
    {"data", "models", "plan", "profile"},
    {"runtime"},
    {"aggregate", "gossip", "ps", "pipeline", "checkpoints"},
    {"worker", "launch", "report", "emulate"},
    {"reproduce"},
    {"cli", "__main__"},
]
FAMILIES = {"gossip", "ps", "pipeline"}


def _top(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "edgetrain" and len(parts) > 1 else None


def _layer(name: str) -> int:
    for i, layer in enumerate(LAYERS):
        if name in layer:
            return i
    raise AssertionError(f"edgetrain.{name} is in no layer: add it to LAYERS")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
    return out


def _package(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def test_no_module_imports_a_higher_layer_or_a_family_it_must_not_know() -> None:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = _package(path)
        for module in _imports(path):
            other = _top(module)
            if other is None or other == own:
                continue
            if _layer(other) > _layer(own):
                problems.append(f"{path.relative_to(REPO)} imports {module} (a higher layer)")
            if own in FAMILIES and other in FAMILIES | {"worker", "launch"}:
                problems.append(f"{path.relative_to(REPO)} imports {module} (a family must not)")
            if own in ("comm", "runtime", "worker", "launch") and other in FAMILIES:
                problems.append(f"{path.relative_to(REPO)} names the family {module}")
    assert problems == []
